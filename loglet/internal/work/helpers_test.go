package work

import (
	"errors"

	"github.com/flightlog/flightlog/metastore"
)

func metastoreNotFound() error { return errors.Join(metastore.ErrNotFound) }
