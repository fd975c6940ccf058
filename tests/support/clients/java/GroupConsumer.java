// A Java KafkaConsumer group member for regroup's consumer-protocol client tests, printing the JSON events of
// Apache Kafka's VerifiableConsumer on stdout, one object per line: startup_complete,
// partitions_assigned / partitions_revoked / partitions_lost, records_consumed (per batch: topic, partition,
// count, minOffset, maxOffset), offsets_committed (success, error) and shutdown_complete.
//
//   java -cp <kafka jars>:<dir> GroupConsumer bootstrap=H:P group=G protocol=classic|consumer \
//       (topic=T | regex=R | pattern=P) [assignor=cooperative-sticky|range|uniform]
//
// topic=: subscribe to one topic. regex=: subscribe(SubscriptionPattern), the KIP-848 regex (RE2J syntax)
// the group coordinator resolves from SubscribedTopicRegex (consumer protocol only). pattern=:
// subscribe(java.util.regex.Pattern), matched by the client against its metadata.
//
// Processing is exactly-once when rebalances are clean: the offsets of each batch are committed synchronously
// after it is processed; a commit refused during a rebalance is kept and committed again — at the latest in
// onPartitionsRevoked, before the partitions go to another member (as Kafka's documentation of
// ConsumerRebalanceListener recommends). SIGTERM commits, closes the consumer (leaving the group) and exits.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class GroupConsumer {
    private static final Map<String, String> ASSIGNORS = Map.of(
        "range", "org.apache.kafka.clients.consumer.RangeAssignor",
        "cooperative-sticky", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");

    private static volatile boolean stopping;
    private static KafkaConsumer<String, String> consumer;
    // Processed but not yet committed: the next offset to consume of each partition.
    private static final Map<TopicPartition, OffsetAndMetadata> pending = new HashMap<>();

    private static synchronized void emit(String name, String fields) {
        System.out.println("{\"name\":\"" + name + "\",\"timestamp\":" + System.currentTimeMillis() + fields + "}");
        System.out.flush();
    }

    private static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    private static String partitions(Collection<TopicPartition> tps) {
        List<String> out = new ArrayList<>();
        for (TopicPartition tp : tps) {
            out.add("{\"topic\":" + quote(tp.topic()) + ",\"partition\":" + tp.partition() + "}");
        }
        return ",\"partitions\":[" + String.join(",", out) + "]";
    }

    /** Commit the pending offsets of {@code only} (all when null); keep them pending when refused. */
    private static void commit(Collection<TopicPartition> only) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : pending.entrySet()) {
            if (only == null || only.contains(e.getKey())) {
                offsets.put(e.getKey(), e.getValue());
            }
        }
        if (offsets.isEmpty()) {
            return;
        }
        List<String> listed = new ArrayList<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            listed.add("{\"topic\":" + quote(e.getKey().topic()) + ",\"partition\":" + e.getKey().partition()
                + ",\"offset\":" + e.getValue().offset() + "}");
        }
        String fields = ",\"offsets\":[" + String.join(",", listed) + "]";
        try {
            consumer.commitSync(offsets);
            offsets.forEach(pending::remove);
            emit("offsets_committed", fields + ",\"success\":true");
        } catch (WakeupException e) {
            throw e;
        } catch (KafkaException e) {
            emit("offsets_committed", fields + ",\"success\":false,\"error\":" + quote(String.valueOf(e)));
        }
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            a.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        String protocol = a.getOrDefault("protocol", "consumer");
        Properties props = new Properties();
        props.put("bootstrap.servers", a.get("bootstrap"));
        props.put("group.id", a.get("group"));
        props.put("group.protocol", protocol);
        props.put("client.id", a.getOrDefault("client", "group-consumer"));
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("metadata.max.age.ms", "2000");
        props.put("max.poll.interval.ms", "30000");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        String assignor = a.get("assignor");
        if (protocol.equals("classic")) {
            props.put("session.timeout.ms", "4000");
            props.put("heartbeat.interval.ms", "500");
            if (assignor != null) {
                props.put("partition.assignment.strategy", ASSIGNORS.get(assignor));
            }
        } else if (assignor != null) {
            props.put("group.remote.assignor", assignor);
        }
        consumer = new KafkaConsumer<>(props);

        Thread main = Thread.currentThread();
        // The loop polls for 500 ms at a time and sees the flag; wakeup() is only for a main thread blocked
        // longer (a commit inside a revocation). The consumer protocol's consumer keeps a wakeup pending
        // through commitSync (it throws without clearing it), so an early wakeup would fail the final commit.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping = true;
            try {
                main.join(3000);
                if (main.isAlive()) {
                    consumer.wakeup();
                    main.join(27000);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));

        ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                emit("partitions_assigned", partitions(tps));
            }

            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                commit(tps);
                tps.forEach(pending::remove);
                emit("partitions_revoked", partitions(tps));
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> tps) {
                tps.forEach(pending::remove);
                emit("partitions_lost", partitions(tps));
            }
        };
        if (a.containsKey("topic")) {
            consumer.subscribe(List.of(a.get("topic")), listener);
        } else if (a.containsKey("regex")) {
            consumer.subscribe(new SubscriptionPattern(a.get("regex")), listener);
        } else {
            consumer.subscribe(Pattern.compile(a.get("pattern")), listener);
        }
        emit("startup_complete", "");
        try {
            while (!stopping) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                List<String> batch = new ArrayList<>();
                for (TopicPartition tp : records.partitions()) {
                    List<ConsumerRecord<String, String>> rs = records.records(tp);
                    long first = rs.get(0).offset();
                    long last = rs.get(rs.size() - 1).offset();
                    batch.add("{\"topic\":" + quote(tp.topic()) + ",\"partition\":" + tp.partition() + ",\"count\":"
                        + rs.size() + ",\"minOffset\":" + first + ",\"maxOffset\":" + last + "}");
                    pending.put(tp, new OffsetAndMetadata(last + 1));
                }
                if (!batch.isEmpty()) {
                    emit("records_consumed", ",\"count\":" + records.count() + ",\"partitions\":["
                        + String.join(",", batch) + "]");
                }
                commit(null);
            }
        } catch (WakeupException e) {
            // shutting down
        } finally {
            try {
                commit(null);
            } catch (WakeupException e) {
                emit("offsets_committed", ",\"success\":false,\"error\":" + quote(String.valueOf(e)));
            }
            consumer.close();
            emit("shutdown_complete", "");
        }
    }
}
