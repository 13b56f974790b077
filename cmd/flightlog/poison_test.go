package main

import "github.com/flightlog/flightlog/envelope"

func poison(epoch, slot uint64) []byte { return envelope.Poison(epoch, slot, envelope.NewNonce()) }
