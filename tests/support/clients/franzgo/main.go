// A consumer-group member or a producer written with franz-go (kgo), printing the JSON events of
// Apache Kafka's VerifiableConsumer/VerifiableProducer on stdout, for regroup's client matrix.
//
//	franzgo consume -bootstrap 127.0.0.1:9092 -topic t -group g [-instance-id i] [-balancer range]
//	franzgo produce -bootstrap 127.0.0.1:9092 -topic t -rate 100
//
// A consumer commits synchronously after each polled batch; on SIGTERM it closes the client (which
// leaves the group) and prints shutdown_complete. A producer sends until SIGTERM, then flushes.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var outMu sync.Mutex

func emit(name string, fields map[string]any) {
	ev := map[string]any{"timestamp": time.Now().UnixMilli(), "name": name}
	for k, v := range fields {
		ev[k] = v
	}
	line, _ := json.Marshal(ev)
	outMu.Lock()
	defer outMu.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

func partitions(m map[string][]int32) []map[string]any {
	out := []map[string]any{}
	for t, ps := range m {
		sorted := append([]int32(nil), ps...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		for _, p := range sorted {
			out = append(out, map[string]any{"topic": t, "partition": p})
		}
	}
	return out
}

type tp struct {
	topic     string
	partition int32
}

func consume(ctx context.Context, bootstrap, topic, group, name, instance, balancer string, session, heartbeat int) error {
	bal := kgo.RangeBalancer()
	if balancer == "cooperative-sticky" {
		bal = kgo.CooperativeStickyBalancer()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(bootstrap),
		kgo.ClientID(name),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(time.Duration(session) * time.Millisecond),
		kgo.HeartbeatInterval(time.Duration(heartbeat) * time.Millisecond),
		kgo.Balancers(bal),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			emit("partitions_assigned", map[string]any{"partitions": partitions(m)})
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			emit("partitions_revoked", map[string]any{"partitions": partitions(m)})
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			emit("partitions_revoked", map[string]any{"partitions": partitions(m), "lost": true})
		}),
	}
	if instance != "" {
		opts = append(opts, kgo.InstanceID(instance))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	emit("startup_complete", nil)
	for ctx.Err() == nil {
		fetches := cl.PollRecords(ctx, 500)
		records := fetches.Records()
		if len(records) > 0 {
			type rng struct{ min, max, count int64 }
			ranges := map[tp]*rng{}
			for _, r := range records {
				k := tp{r.Topic, r.Partition}
				if x, ok := ranges[k]; ok {
					x.count++
					if r.Offset < x.min {
						x.min = r.Offset
					}
					if r.Offset > x.max {
						x.max = r.Offset
					}
				} else {
					ranges[k] = &rng{r.Offset, r.Offset, 1}
				}
			}
			parts := []map[string]any{}
			committed := []map[string]any{}
			var total int64
			for k, x := range ranges {
				total += x.count
				parts = append(parts, map[string]any{"topic": k.topic, "partition": k.partition, "count": x.count, "minOffset": x.min, "maxOffset": x.max})
				committed = append(committed, map[string]any{"topic": k.topic, "partition": k.partition, "offset": x.max + 1})
			}
			emit("records_consumed", map[string]any{"count": total, "partitions": parts})
			cerr := cl.CommitRecords(context.Background(), records...)
			fields := map[string]any{"offsets": committed, "success": cerr == nil}
			if cerr != nil {
				fields["error"] = cerr.Error()
			}
			emit("offsets_committed", fields)
		}
		cl.AllowRebalance()
	}
	cl.Close()
	emit("shutdown_complete", nil)
	return nil
}

func produce(ctx context.Context, bootstrap, topic, name string, rate float64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ClientID(name), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	emit("startup_complete", nil)
	interval := time.Duration(float64(time.Second) / rate)
	for i := 0; ctx.Err() == nil; i++ {
		v := strconv.Itoa(i)
		cl.Produce(context.Background(), &kgo.Record{Key: []byte(v), Value: []byte(v)}, func(r *kgo.Record, err error) {
			if err != nil {
				emit("producer_send_error", map[string]any{"error": err.Error()})
				return
			}
			emit("producer_send_success", map[string]any{"topic": r.Topic, "partition": r.Partition, "offset": r.Offset, "value": string(r.Value)})
		})
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
	flushCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = cl.Flush(flushCtx)
	cl.Close()
	emit("shutdown_complete", nil)
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: franzgo consume|produce [flags]")
		os.Exit(2)
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap server")
	topic := fs.String("topic", "", "topic")
	group := fs.String("group", "", "group id")
	name := fs.String("name", "franzgo", "client id")
	instance := fs.String("instance-id", "", "group.instance.id (static membership)")
	balancer := fs.String("balancer", "range", "range or cooperative-sticky")
	session := fs.Int("session-timeout", 4000, "session timeout (ms)")
	heartbeat := fs.Int("heartbeat-interval", 500, "heartbeat interval (ms)")
	rate := fs.Float64("rate", 100, "records per second")
	_ = fs.Parse(os.Args[2:])
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch mode {
	case "consume":
		err = consume(ctx, *bootstrap, *topic, *group, *name, *instance, *balancer, *session, *heartbeat)
	case "produce":
		err = produce(ctx, *bootstrap, *topic, *name, *rate)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
