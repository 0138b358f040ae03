// IdempotentProducer: the Java client's idempotent producer (acks=all,
// enable.idempotence=true), run by internal/compat with
//   java -cp 'LIB/*:BUILD' IdempotentProducer BOOTSTRAP TOPIC COUNT KEYS PACE_MS
// It sends COUNT records, record i with key "k<i % KEYS>" and value
// "<key>-<i, 6 digits>", sleeping PACE_MS after every 10 sends so that a
// partition leader's SIGKILL lands in the middle of the run. Each
// acknowledged record is printed from its callback as
//   ACK <partition> <offset> <key> <value>
// a failed one as "ERR <key> <value> <exception>" on stderr. It prints
// "SENT <n>" after each 100 sends, and exits 0 only if every record was
// acknowledged.
import java.util.Properties;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class IdempotentProducer {
  public static void main(String[] args) throws Exception {
    if (args.length != 5) {
      System.err.println("usage: IdempotentProducer BOOTSTRAP TOPIC COUNT KEYS PACE_MS");
      System.exit(2);
    }
    String bootstrap = args[0], topic = args[1];
    int count = Integer.parseInt(args[2]), keys = Integer.parseInt(args[3]);
    long pace = Long.parseLong(args[4]);
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    p.put(ProducerConfig.CLIENT_ID_CONFIG, "compat-java-producer");
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    AtomicInteger failed = new AtomicInteger();
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
      for (int i = 0; i < count; i++) {
        String key = "k" + (i % keys);
        String value = String.format("%s-%06d", key, i);
        producer.send(new ProducerRecord<>(topic, key, value), (md, err) -> {
          if (err != null) {
            failed.incrementAndGet();
            System.err.println("ERR " + key + " " + value + " " + err);
            return;
          }
          synchronized (System.out) {
            System.out.println("ACK " + md.partition() + " " + md.offset() + " " + key + " " + value);
          }
        });
        if ((i + 1) % 10 == 0 && pace > 0) {
          Thread.sleep(pace);
        }
        if ((i + 1) % 100 == 0) {
          synchronized (System.out) {
            System.out.println("SENT " + (i + 1));
          }
        }
      }
      producer.flush();
    }
    System.out.flush();
    System.exit(failed.get() == 0 ? 0 : 1);
  }
}
