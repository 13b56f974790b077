// Package file is flightlog's embedded default object store: one bucket
// kept as files under a local directory.
//
// It owns the mapping from object keys to paths and the on-disk protocol
// that makes PutIfAbsent a durable conditional create. The invariant it
// keeps: an object is visible under its key only when its whole body is on
// stable storage, it is never replaced, and no key reaches outside the root.
//
// # Create protocol
//
// PutIfAbsent writes the body to a temporary file in the root's reserved
// directory ".tmp", fsyncs it, creates every missing directory of the
// object's path (fsyncing each new directory's parent), then hard-links the
// temporary file to the object's path. link(2) never replaces an existing
// name: it fails with EEXIST, which becomes objstore.ErrExists, so of any
// number of racing creates exactly one wins — across goroutines and across
// processes on one host sharing the directory (the filesystem arbitrates;
// there is no lock file). Finally the object's directory is fsynced and the
// temporary name removed. A crash at any step leaves either no object or a
// whole one; stray temporary files are never read or listed, and Open
// removes those older than fifteen minutes (younger ones may belong to
// another process's create in progress).
//
// # Key mapping
//
// A key's "/"-separated segments become nested directories ending in a
// file. Every name on disk starts with a one-byte tag saying what it is:
//
//	=name   an object file (the last segment of a key)
//	+name   a directory (a segment followed by "/")
//	~chunk  a continuation directory: the first 200 bytes of a segment of
//	        200 bytes or more, which continues inside it
//
// Tags let the keys "a" and "a/b" coexist ("=a" and "+a/=b"), keep every
// name clear of ".", ".." and the reserved ".tmp", and, with continuation
// directories, keep every name within the usual 255-byte limit for keys of
// up to objstore.MaxKeyLen bytes. The mapping is reversible: List rebuilds
// keys from names. Listing walks directories in key order, not name order
// (the tags and the "/" that a directory stands for sort differently from
// the names), so a listing is in ascending byte order of keys and can stop
// at its limit without reading the whole tree.
//
// # Requirements and limits
//
// The directory must be on a local filesystem with hard links, byte-string
// names and case-sensitive lookups (Linux ext4, xfs, btrfs, tmpfs). Open
// refuses a case-insensitive directory, where "A" and "a" would collide.
// Network filesystems without atomic link are not supported. Delete
// leaves directories in place, even empty ones: removing them would race
// with creates in them.
package file
