// Package flightwatermill adapts flightlog to Watermill
// (github.com/ThreeDotsLabs/watermill): a Publisher that appends messages to
// streams (topic = stream) and a Subscriber that reads them as a consumer
// group on flightlog's consumer offsets (loglet/groups' Session). It passes
// Watermill's own pub/sub test suite (pubsub/tests.TestPubSub) with the
// features below; it lives in a module of its own, so the core module does
// not depend on Watermill.
//
// Features, as declared to the suite:
//   - Persistent: yes. Messages are records in the log; a new Publisher or
//     Subscriber (or a new process) on the same log sees them.
//   - ConsumerGroups: yes, and every Subscriber belongs to one
//     (SubscriberConfig.ConsumerGroup): each group receives every message of
//     a topic, from the group's committed offset on (a group that has
//     committed nothing starts at SubscriberConfig.Start: the oldest record
//     by default).
//   - GuaranteedOrder: yes. A subscription hands out one message at a time,
//     in stream order, and the next only after the previous one is acked;
//     a Nack re-delivers the same message before any later one.
//   - ExactlyOnceDelivery: no. Delivery is at least once: an Ack commits the
//     group's offset past the message, and a message processed but not yet
//     committed when the subscriber stops (a crash, a Close between
//     processing and Ack, a failed commit) is delivered again to the
//     group's next subscription. Several subscribers of one group on one
//     topic each read the topic (their commits merge by maximum, so one
//     that falls behind skips what the others acknowledged): work is not
//     partitioned between them, and a message may reach more than one.
//   - NewSubscriberReceivesOldMessages: no. A new subscriber of a group
//     resumes at the group's offset; only a new group sees old messages.
//
// Messages map onto records: the payload is the body, the UUID is the
// header UUIDHeader and each metadata entry is a header of its own name
// (a metadata key equal to UUIDHeader is not carried). A record written by
// something other than this Publisher, with no UUID header, gets the UUID
// "flightlog:<topic>:<seq>".
//
// Costs: a Publish is one loglet Append (per MaxBatchRecords messages) and
// returns once the messages are durable; an Ack is one metastore commit
// (groups.Offsets). The Publisher and Subscriber do not own the log: the
// host opens and closes the loglet.Star (or loglet.Reader) they use.
package flightwatermill
