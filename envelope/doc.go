// Package envelope owns flightlog's object formats: the 60-byte envelope that
// heads every chain slot and settled object, the transit bundle a flight is
// written as, the poison object a fencer writes, the record encoding, the
// frame compression (S2 and Zstandard from github.com/klauspost/compress) and
// the checksum (CRC-32C, Castagnoli) they all use. It does no I/O: callers
// hand it bytes and get bytes back.
//
// # Invariants
//
// Decoders never panic and never allocate by an unchecked length: every
// length is bounded by the remaining input or by a documented limit (see
// MaxFrameRawBytes and its siblings) before it is trusted. Every decode
// failure is an error wrapping ErrCorrupt whose message starts "envelope: ".
//
// A slot copy is "ours" only if its kind is flight and its epoch, slot and
// nonce all match the writer's: Envelope.IsFlightOf. A poison carries the
// fencer's nonce and is never anyone's flight.
//
// # Envelope (60 bytes, little-endian)
//
//	offset size field
//	     0    4 magic          "FLG1" (Magic)
//	     4    2 version        1 (FormatVersion)
//	     6    1 kind           1 flight, 2 poison, 3 settled
//	     7    1 flags          0, or FlagProducers (1) | FlagFences (2) on a flight
//	     8    8 epoch
//	    16    8 slot
//	    24   12 nonce
//	    36    8 size           whole object, envelope included
//	    44    8 footerOffset   object-absolute; 0 for poison
//	    52    4 footerLength   0 for poison
//	    56    4 crc32c         over bytes 0..55
//
// One ranged read of bytes 0..59 classifies a slot (ParseEnvelope) and
// locates its footer. A poison object is exactly its envelope: size 60, no
// footer. A flight's footer ends the object: its offset plus its length is
// the object's size.
//
// # Transit bundle (kind flight)
//
//	[0, 60)                   envelope
//	[60, footerOffset)        frames, in the order they were added
//	[footerOffset, size)      footer
//
// A frame is one stream's consecutive records, Count of them, encoded as
// below and then compressed as a whole with the frame's codec (0 none, 1 S2
// block format, 2 one Zstandard frame declaring its content size). Nothing
// else is stored with the frame: everything a reader needs is in its footer
// entry, so a span ref copies that entry and reads the frame with one ranged
// read. A codec is only used when it makes the frame smaller; otherwise the
// frame is stored as is with codec none, so a stored length never exceeds
// the raw length.
//
// The footer is the frame entries in frame order, then the frame count and a
// checksum:
//
//	entry*  per frame, varint = encoding/binary zigzag varint:
//	          uvarint  len(stream), then the stream name (1..MaxStreamNameLen bytes)
//	          uvarint  firstSeq
//	          uvarint  count                          (1..MaxFrameRecords)
//	          varint   minTimestamp
//	          uvarint  maxTimestamp - minTimestamp
//	          uvarint  offset                         object-absolute
//	          uvarint  length                         stored bytes
//	          uvarint  rawLength                      before compression (<= MaxFrameRawBytes)
//	          1 byte   codec
//	          4 bytes  crc32c of the stored bytes (little-endian)
//	4 bytes  frame count (little-endian, <= MaxFrames)
//	4 bytes  crc32c of every footer byte before it (little-endian)
//
// Frames lie within [60, footerOffset) in ascending, non-overlapping order,
// and frames of one stream never overlap in sequence numbers.
//
// A flight whose envelope has FlagProducers carries a producer section
// between the frame count and the checksum (a footer without the flag is
// exactly the layout above, as older versions wrote it):
//
//	uvarint  mark count
//	mark*    uvarint frame index, uvarint offset of the first record in
//	         the frame, uvarint count, uvarint len(id), id
//	         (1..MaxProducerIDLen bytes), uvarint producer sequence
//	4 bytes  the section's length, count included (little-endian)
//
// A mark says that a run of one frame's records is one producer's batch
// (ProducerMark); a frame's marks are in order and never overlap.
// BundleWriter.MarkProducer writes them, ParseProducers reads them.
//
// A flight whose envelope has FlagFences carries a fence section after
// that (after the producer section, if any), before the checksum:
//
//	uvarint  mark count
//	mark*    uvarint frame index, uvarint offset of the record in the
//	         frame, uvarint len(token), token (0..MaxFencingTokenLen bytes)
//	4 bytes  the section's length, count included (little-endian)
//
// A mark says that a record is a fence batch setting its stream's fencing
// token (FenceMark); a frame's marks are in order. BundleWriter.MarkFence
// writes them, ParseFences reads them.
//
// # Record
//
//	varint   timestamp (ms since the Unix epoch, zigzag)
//	uvarint  header count (<= MaxRecordHeaders)
//	per header: uvarint len(name), name, uvarint len(value), value
//	uvarint  len(body), body
//
// The timestamp is stored whole, not as a delta, so that AppendRecord needs
// no state and any record can be encoded on its own; the compressor absorbs
// the repeated high bytes. The smallest record is 3 bytes.
//
// # The caller's loop
//
// Writing a flight (the render of a claimed flight, in the loglet's
// workers):
//
//  1. For each stream's group of batches, AppendRecord each record into one
//     buffer, then BundleWriter.AddFrame it with its first sequence number,
//     count, timestamp bounds and codec.
//  2. BundleWriter.Finish(epoch, slot, nonce) returns the object to
//     PutIfAbsent into every bucket, and the frames (with object-absolute
//     offsets and CRCs) for the flight index and span refs.
//
// Reading a slot (chain, fence, walk, readers):
//
//  1. ParseEnvelope(first 60 bytes). Poison: this bucket holds no copy (the
//     slot is dead only with K−W+1 poisons; see chain.Decide).
//     Flight: IsFlightOf says whether it is the expected copy.
//  2. ParseFooter(env, obj[env.FooterOffset:env.Size]) lists the frames.
//  3. DecodeFrame(info, obj[info.Offset:info.End()]) returns the records.
//
// Any error wrapping ErrCorrupt means this copy is unusable: try the next
// bucket.
package envelope
