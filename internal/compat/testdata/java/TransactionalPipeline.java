// TransactionalPipeline: Kafka's consume-transform-produce loop with the
// Java client's transactions, run by internal/compat with
//   java -cp 'LIB/*:BUILD' TransactionalPipeline BOOTSTRAP IN OUT GROUP TXNID
// A consumer of group GROUP reads IN with isolation.level=read_committed;
// per poll one transaction writes, for every input record, one record to
// OUT (the input's key, value "out:" + the input's value, headers
// in-partition and in-offset) and commits the input offsets in the same
// transaction (sendOffsetsToTransaction with the consumer's group
// metadata). A transaction that fails with a retriable or abortable error
// is aborted and the consumer rewound to the group's committed offsets, so
// its inputs are processed again. Printed on stdout:
//   COMMIT <records> <partition>:<next offset>,...   a transaction committed
//   ABORT <records> <exception>                      a transaction aborted
//   ASSIGNED <partitions> / REVOKED <partitions> / LOST <partitions>
// ProducerFencedException (a newer incarnation took the transactional id)
// prints FENCED and exits 3. It stops when its standard input closes:
// exit 0.
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TransactionalPipeline {
  static void say(String s) {
    synchronized (System.out) {
      System.out.println(s);
      System.out.flush();
    }
  }

  // rewind moves the consumer back to the group's committed offsets of
  // the partitions it owns (the start for a partition without any).
  static void rewind(KafkaConsumer<String, String> consumer) {
    Set<TopicPartition> owned = consumer.assignment();
    Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(owned);
    for (TopicPartition tp : owned) {
      OffsetAndMetadata o = committed.get(tp);
      if (o == null) {
        consumer.seekToBeginning(List.of(tp));
      } else {
        consumer.seek(tp, o.offset());
      }
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 5) {
      System.err.println("usage: TransactionalPipeline BOOTSTRAP IN OUT GROUP TXNID");
      System.exit(2);
    }
    String in = args[1], out = args[2];
    Properties c = new Properties();
    c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    c.put(ConsumerConfig.GROUP_ID_CONFIG, args[3]);
    c.put(ConsumerConfig.CLIENT_ID_CONFIG, "compat-java-txn-consumer");
    c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50");
    c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    p.put(ProducerConfig.CLIENT_ID_CONFIG, "compat-java-txn-producer");
    p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, args[4]);
    p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "30000");
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c);
    KafkaProducer<String, String> producer = new KafkaProducer<>(p);
    producer.initTransactions();
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
    consumer.subscribe(List.of(in), new ConsumerRebalanceListener() {
      public void onPartitionsAssigned(Collection<TopicPartition> tps) { say("ASSIGNED " + tps); }
      public void onPartitionsRevoked(Collection<TopicPartition> tps) { say("REVOKED " + tps); }
      public void onPartitionsLost(Collection<TopicPartition> tps) { say("LOST " + tps); }
    });
    try {
      while (true) {
        ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(200));
        if (recs.isEmpty()) {
          continue;
        }
        Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
        producer.beginTransaction();
        try {
          for (ConsumerRecord<String, String> r : recs) {
            ProducerRecord<String, String> o = new ProducerRecord<>(out, r.key(), "out:" + r.value());
            o.headers().add("in-partition", Integer.toString(r.partition()).getBytes(StandardCharsets.UTF_8));
            o.headers().add("in-offset", Long.toString(r.offset()).getBytes(StandardCharsets.UTF_8));
            producer.send(o);
            next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
          }
          producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
          producer.commitTransaction();
        } catch (ProducerFencedException e) {
          say("FENCED " + e);
          System.exit(3);
        } catch (KafkaException e) {
          say("ABORT " + recs.count() + " " + e.toString().replace('\n', ' '));
          producer.abortTransaction();
          rewind(consumer);
          continue;
        }
        StringBuilder b = new StringBuilder("COMMIT " + recs.count() + " ");
        String sep = "";
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : new TreeMap<TopicPartition, OffsetAndMetadata>(
            (x, y) -> Integer.compare(x.partition(), y.partition())) {{ putAll(next); }}.entrySet()) {
          b.append(sep).append(e.getKey().partition()).append(':').append(e.getValue().offset());
          sep = ",";
        }
        say(b.toString());
      }
    } catch (WakeupException e) {
      // standard input closed
    } finally {
      producer.close();
      consumer.close();
    }
    System.exit(0);
  }
}
