// CooperativeConsumer: one member of a Java consumer group with
// CooperativeStickyAssignor that commits after processing, run by
// internal/compat with
//   java -cp 'LIB/*:BUILD' CooperativeConsumer BOOTSTRAP TOPIC GROUP MEMBER HANDLE_MS
// Loop: poll, handle each record (print it, then sleep HANDLE_MS), commit
// the records handled (commitSync), poll again. A commit refused because a
// rebalance is in progress is kept and sent after the next poll, or from
// onPartitionsRevoked when the partition leaves. Printed on stdout:
//   REC <partition> <offset> <key> <value>   a record handled
//   COMMIT <partition> <next offset>         after commitSync returned
//   ASSIGNED <partitions> / REVOKED <partitions> / LOST <partitions>
// It stops when its standard input closes: wakeup, close (which leaves
// the group), exit 0.
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RetriableCommitFailedException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

public class CooperativeConsumer {
  static void say(String s) {
    synchronized (System.out) {
      System.out.println(s);
      System.out.flush();
    }
  }

  // pending: offsets handled but not yet committed. Touched only by the
  // polling thread (the rebalance listener runs inside poll).
  static final Map<TopicPartition, OffsetAndMetadata> pending = new HashMap<>();

  // commit commits pending's entries for tps (all when null); a commit
  // refused during a rebalance stays pending.
  static void commit(KafkaConsumer<String, String> consumer, Collection<TopicPartition> tps) {
    Map<TopicPartition, OffsetAndMetadata> some = new HashMap<>();
    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : pending.entrySet()) {
      if (tps == null || tps.contains(e.getKey())) {
        some.put(e.getKey(), e.getValue());
      }
    }
    if (some.isEmpty()) {
      return;
    }
    try {
      consumer.commitSync(some);
    } catch (RebalanceInProgressException | RetriableCommitFailedException e) {
      say("COMMITLATER " + some.keySet() + " " + e);
      return;
    }
    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : some.entrySet()) {
      pending.remove(e.getKey(), e.getValue());
      say("COMMIT " + e.getKey().partition() + " " + e.getValue().offset());
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 5) {
      System.err.println("usage: CooperativeConsumer BOOTSTRAP TOPIC GROUP MEMBER HANDLE_MS");
      System.exit(2);
    }
    long handle = Long.parseLong(args[4]);
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    p.put(ConsumerConfig.GROUP_ID_CONFIG, args[2]);
    p.put(ConsumerConfig.CLIENT_ID_CONFIG, "compat-java-" + args[3]);
    p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, CooperativeStickyAssignor.class.getName());
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p);
    Thread stdin = new Thread(() -> {
      try {
        while (System.in.read() >= 0) {
        }
      } catch (Exception e) {
        // closed either way
      }
      consumer.wakeup();
    });
    stdin.setDaemon(true);
    stdin.start();
    consumer.subscribe(List.of(args[1]), new ConsumerRebalanceListener() {
      public void onPartitionsAssigned(Collection<TopicPartition> tps) { say("ASSIGNED " + tps); }
      public void onPartitionsRevoked(Collection<TopicPartition> tps) {
        say("REVOKED " + tps);
        commit(consumer, tps);
        pending.keySet().removeAll(tps);
      }
      public void onPartitionsLost(Collection<TopicPartition> tps) {
        say("LOST " + tps);
        pending.keySet().removeAll(tps);
      }
    });
    try {
      while (true) {
        ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(200));
        for (ConsumerRecord<String, String> r : recs) {
          say("REC " + r.partition() + " " + r.offset() + " " + r.key() + " " + r.value());
          if (handle > 0) {
            Thread.sleep(handle);
          }
          pending.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
        }
        commit(consumer, null);
      }
    } catch (WakeupException e) {
      // standard input closed
    } finally {
      commit(consumer, null);
      consumer.close();
    }
    System.exit(0);
  }
}
