package main

import (
	"strconv"

	"github.com/tapes-dev/tapes/internal/consumer"
	"github.com/tapes-dev/tapes/internal/producer"
)

// resequencer is --resequence-salted: it holds back each record of a
// salted key (producerd --salt-hot-key: headers salt and key_seq) until
// the records before it of the same producer run and entity have been
// handed on, and hands records on in key_seq order, so that their effects
// are applied in the order the producer sent them although they came from
// several partitions. Records without a salt header pass through.
//
// It restores the order of what this consumer reads: a salted key's
// records must all reach it (a consumer that reads every partition the key
// reaches, from the key's first record on). A key_seq whose predecessor
// never comes is held back for good, and so is the committed offset of its
// partition (see heldBack). State is in memory only. The poll goroutine
// only.
type resequencer struct {
	// next is the key_seq handed on next, per producer run and entity
	// (absent: 0, the key's first record).
	next map[seqKey]int64
	// pending are the held-back records, by key and key_seq; every key_seq
	// in it is above next[key].
	pending map[seqKey]map[int64]consumer.Record
}

// seqKey is one order domain of key_seq: a producer run (its event_id
// prefix) and an entity.
type seqKey struct{ producer, entity string }

func newResequencer() *resequencer {
	return &resequencer{next: map[seqKey]int64{}, pending: map[seqKey]map[int64]consumer.Record{}}
}

// saltedSeq returns r's order domain and key_seq when r is a salted record
// producerd made (headers salt, key_seq, entity and an event_id
// PRODUCER-HEX-N).
func saltedSeq(r consumer.Record) (seqKey, int64, bool) {
	var salted bool
	var eventID, entity, seq string
	for _, h := range r.Headers {
		switch h.Key {
		case producer.SaltHeader:
			salted = true
		case producer.KeySeqHeader:
			seq = string(h.Value)
		case producer.EventIDHeader:
			eventID = string(h.Value)
		case producer.EntityHeader:
			entity = string(h.Value)
		}
	}
	prefix, _, ok := producer.SplitEventID(eventID)
	n, err := strconv.ParseInt(seq, 10, 64)
	if !salted || !ok || err != nil || n < 0 {
		return seqKey{}, 0, false
	}
	return seqKey{prefix, entity}, n, true
}

// offer takes the record just read and returns the records whose effect
// may be applied now, in order: r itself when it is not salted or is its
// key's next; then the held-back records it unblocks. A salted record
// below its key's next (a redelivery) passes through: its effect, if any,
// was applied already, and the sink decides.
func (q *resequencer) offer(r consumer.Record) []consumer.Record {
	k, n, ok := saltedSeq(r)
	if !ok || n < q.next[k] {
		return []consumer.Record{r}
	}
	if n > q.next[k] {
		if q.pending[k] == nil {
			q.pending[k] = map[int64]consumer.Record{}
		}
		q.pending[k][n] = r
		return nil
	}
	out := []consumer.Record{r}
	n++
	for p := q.pending[k]; ; n++ {
		h, ok := p[n]
		if !ok {
			break
		}
		out = append(out, h)
		delete(p, n)
	}
	q.next[k] = n
	if len(q.pending[k]) == 0 {
		delete(q.pending, k)
	}
	return out
}

// heldBack returns the lowest offset held back per partition: a commit of
// that partition must not go past it, or a restart would skip the record.
func (q *resequencer) heldBack() map[consumer.TopicPartition]int64 {
	out := map[consumer.TopicPartition]int64{}
	for _, p := range q.pending {
		for _, r := range p {
			tp := consumer.TopicPartition{Topic: r.Topic, Partition: r.Partition}
			if o, ok := out[tp]; !ok || r.Offset < o {
				out[tp] = r.Offset
			}
		}
	}
	return out
}

// capCommit lowers offsets (positions to commit) to the held-back records'.
func (q *resequencer) capCommit(offsets map[consumer.TopicPartition]int64) map[consumer.TopicPartition]int64 {
	held := q.heldBack()
	if len(held) == 0 {
		return offsets
	}
	out := make(map[consumer.TopicPartition]int64, len(offsets))
	for tp, o := range offsets {
		if h, ok := held[tp]; ok && h < o {
			o = h
		}
		out[tp] = o
	}
	return out
}

// drop forgets the held-back records of partitions this consumer no longer
// owns (their next owner reads them again from the committed offset, which
// capCommit kept below them) and returns how many.
func (q *resequencer) drop(tps []consumer.TopicPartition) int {
	gone := map[consumer.TopicPartition]bool{}
	for _, tp := range tps {
		gone[tp] = true
	}
	n := 0
	for k, p := range q.pending {
		for seq, r := range p {
			if gone[consumer.TopicPartition{Topic: r.Topic, Partition: r.Partition}] {
				delete(p, seq)
				n++
			}
		}
		if len(p) == 0 {
			delete(q.pending, k)
		}
	}
	return n
}

// held is the number of records held back.
func (q *resequencer) held() int {
	n := 0
	for _, p := range q.pending {
		n += len(p)
	}
	return n
}
