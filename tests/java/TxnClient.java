// Apache Kafka's Java client (kafka-clients 4.4.x) as the suite drives it: seed a topic,
// consume-transform-produce with sendOffsetsToTransaction, read a topic back. Run as a
// single-file program with the jars that scripts/test resolves from tests/java/pom.xml:
//
//   java -cp 'target/kafka-tools-jars/*' tests/java/TxnClient.java <command> --key value ...
//
// Like the Python programs in tests/e2e/, it prints one JSON object per line on stdout ("ev"
// names the event) so that tests/tests/e2e_java.rs can follow a run and check its history;
// diagnostics go to stderr.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Future;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnClient {
    public static void main(String[] argv) throws Exception {
        if (argv.length == 0) {
            System.err.println("usage: TxnClient seed|transform|consume --key value ...");
            System.exit(2);
        }
        Map<String, String> a = new HashMap<>();
        for (int i = 1; i + 1 < argv.length; i += 2) {
            a.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        try {
            switch (argv[0]) {
                case "seed" -> seed(a);
                case "transform" -> transform(a);
                case "consume" -> consume(a);
                default -> throw new IllegalArgumentException("unknown command " + argv[0]);
            }
        } catch (Exception e) {
            e.printStackTrace();
            emit("fatal", "error", q(e.getClass().getSimpleName()), "message", q(String.valueOf(e.getMessage())));
            System.exit(1);
        }
        System.exit(0);
    }

    /** Writes `prefix-p-i` to each partition p of `topic`, `per-partition` records each, with an idempotent producer. */
    static void seed(Map<String, String> a) throws Exception {
        Properties c = common(a);
        c.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        c.put(ProducerConfig.ACKS_CONFIG, "all");
        List<String> values = new ArrayList<>();
        try (KafkaProducer<String, String> p = new KafkaProducer<>(c, new StringSerializer(), new StringSerializer())) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            List<Object[]> order = new ArrayList<>();
            int per = Integer.parseInt(a.get("per-partition"));
            for (int part : partitions(a)) {
                for (int i = 0; i < per; i++) {
                    String v = a.get("prefix") + "-" + part + "-" + i;
                    sent.add(p.send(new ProducerRecord<>(a.get("topic"), part, null, v)));
                    order.add(new Object[] {part, v});
                }
            }
            for (int i = 0; i < sent.size(); i++) {
                RecordMetadata md = sent.get(i).get();
                values.add("[" + order.get(i)[0] + "," + q((String) order.get(i)[1]) + "," + md.offset() + "]");
            }
        }
        emit("seeded", "values", "[" + String.join(",", values) + "]");
    }

    /**
     * Consume-transform-produce: every input record `v` becomes `out-v` on the same partition of
     * `output`, committed with the input offsets in one transaction (`batch` records at most).
     * Every `abort-every`-th transaction is aborted and its input read again. `hold-ms` sleeps
     * inside each transaction after its records were sent. A fenced producer (a newer instance
     * with the same transactional.id) prints `fenced` and exits 0: it is the zombie.
     */
    static void transform(Map<String, String> a) throws Exception {
        String input = a.get("input");
        String output = a.get("output");
        int batch = Integer.parseInt(a.getOrDefault("batch", "5"));
        int abortEvery = Integer.parseInt(a.getOrDefault("abort-every", "0"));
        long holdMs = Long.parseLong(a.getOrDefault("hold-ms", "0"));
        long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(a.getOrDefault("deadline", "90"));

        Properties pc = common(a);
        pc.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, a.get("txn-id"));
        pc.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "20000");
        Properties cc = common(a);
        cc.put(ConsumerConfig.GROUP_ID_CONFIG, a.get("group"));
        cc.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cc.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cc.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cc.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, String.valueOf(batch));

        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pc, new StringSerializer(), new StringSerializer());
             KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cc, new StringDeserializer(), new StringDeserializer())) {
            producer.initTransactions();
            emit("init", "txn_id", q(a.get("txn-id")));
            List<TopicPartition> tps = new ArrayList<>();
            for (int part : partitions(a)) {
                tps.add(new TopicPartition(input, part));
            }
            Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
            emit("input_ends", "ends", pairs(ends));
            consumer.subscribe(List.of(input), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {}
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    emit("assigned", "partitions", parts.stream().map(tp -> String.valueOf(tp.partition())).toList().toString());
                }
            });
            int txn = 0;
            while (true) {
                if (System.currentTimeMillis() > deadline) {
                    emit("deadline");
                    System.exit(1);
                }
                Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(new java.util.HashSet<>(tps));
                boolean done = true;
                for (TopicPartition tp : tps) {
                    OffsetAndMetadata o = committed.get(tp);
                    if ((o == null ? 0 : o.offset()) < ends.get(tp)) {
                        done = false;
                    }
                }
                if (done) {
                    Map<TopicPartition, Long> offsets = new TreeMap<>((x, y) -> Integer.compare(x.partition(), y.partition()));
                    committed.forEach((tp, o) -> offsets.put(tp, o.offset()));
                    emit("done", "committed", pairs(offsets));
                    return;
                }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                txn++;
                boolean abort = abortEvery > 0 && txn % abortEvery == 0;
                List<String> inputs = new ArrayList<>();
                List<String> outputs = new ArrayList<>();
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                try {
                    producer.beginTransaction();
                    for (ConsumerRecord<String, String> r : records) {
                        String out = "out-" + r.value();
                        producer.send(new ProducerRecord<>(output, r.partition(), null, out));
                        inputs.add(q(r.value()));
                        outputs.add("[" + r.partition() + "," + q(out) + "]");
                        next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    producer.flush();
                    emit("txn_produced", "txn", String.valueOf(txn), "inputs", inputs.toString(), "outputs", outputs.toString());
                    if (holdMs > 0) {
                        Thread.sleep(holdMs);
                    }
                    producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
                    if (abort) {
                        producer.abortTransaction();
                        // Read the aborted input again: back to the last committed positions.
                        Map<TopicPartition, OffsetAndMetadata> back = consumer.committed(next.keySet());
                        for (TopicPartition tp : next.keySet()) {
                            OffsetAndMetadata o = back.get(tp);
                            consumer.seek(tp, o == null ? 0 : o.offset());
                        }
                        emit("abort", "txn", String.valueOf(txn), "inputs", inputs.toString());
                    } else {
                        producer.commitTransaction();
                        emit("commit", "txn", String.valueOf(txn), "inputs", inputs.toString(), "outputs", outputs.toString());
                    }
                } catch (KafkaException e) {
                    if (!fenced(e) && !fenced(e.getCause())) {
                        throw e;
                    }
                    emit("fenced", "txn", String.valueOf(txn), "error", q(e.getClass().getSimpleName()));
                    return;
                }
            }
        }
    }

    /** Reads `partitions` of `topic` from the start until every one is at its end and at least `min-records` were read. */
    static void consume(Map<String, String> a) throws Exception {
        Properties cc = common(a);
        cc.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, a.getOrDefault("isolation", "read_committed"));
        cc.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        int min = Integer.parseInt(a.getOrDefault("min-records", "0"));
        long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(a.getOrDefault("deadline", "30"));
        int count = 0;
        boolean eof = false;
        boolean timedOut = false;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cc, new StringDeserializer(), new StringDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int part : partitions(a)) {
                tps.add(new TopicPartition(a.get("topic"), part));
            }
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            while (true) {
                Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
                eof = true;
                for (TopicPartition tp : tps) {
                    if (consumer.position(tp) < ends.get(tp)) {
                        eof = false;
                    }
                }
                if (eof && count >= min) {
                    break;
                }
                if (System.currentTimeMillis() > deadline) {
                    timedOut = true;
                    break;
                }
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    count++;
                    emit("record", "partition", String.valueOf(r.partition()), "offset", String.valueOf(r.offset()), "value", q(r.value()));
                }
            }
        }
        emit("done", "count", String.valueOf(count), "eof", String.valueOf(eof), "timed_out", String.valueOf(timedOut));
    }

    /** Whether `e` says a newer producer with the same transactional.id fenced this one. */
    static boolean fenced(Throwable e) {
        return e instanceof ProducerFencedException || e instanceof InvalidProducerEpochException;
    }

    static Properties common(Map<String, String> a) {
        Properties p = new Properties();
        p.put("bootstrap.servers", a.get("bootstrap"));
        p.put("client.id", a.getOrDefault("client-id", "txn-client"));
        p.put("request.timeout.ms", "10000");
        p.put("retry.backoff.ms", "50");
        p.put("retry.backoff.max.ms", "500");
        // Security settings (security.protocol, sasl.*, ssl.*), one KEY=VALUE a line.
        String extra = a.get("client-config");
        if (extra != null) {
            try (java.io.Reader r = java.nio.file.Files.newBufferedReader(java.nio.file.Path.of(extra))) {
                p.load(r);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
        return p;
    }

    static List<Integer> partitions(Map<String, String> a) {
        List<Integer> out = new ArrayList<>();
        for (String p : a.getOrDefault("partitions", "0").split(",")) {
            if (!p.isEmpty()) {
                out.add(Integer.parseInt(p));
            }
        }
        return out;
    }

    /** `[[partition, offset], ...]` */
    static String pairs(Map<TopicPartition, Long> m) {
        List<String> out = new ArrayList<>();
        m.forEach((tp, o) -> out.add("[" + tp.partition() + "," + o + "]"));
        return out.toString();
    }

    /** A JSON string. */
    static String q(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') {
                b.append('\\').append(ch);
            } else if (ch < 0x20) {
                b.append(String.format("\\u%04x", (int) ch));
            } else {
                b.append(ch);
            }
        }
        return b.append('"').toString();
    }

    /** One event line: `fields` are name, JSON value pairs. */
    static synchronized void emit(String ev, String... fields) {
        StringBuilder b = new StringBuilder("{\"ev\":").append(q(ev));
        for (int i = 0; i + 1 < fields.length; i += 2) {
            b.append(',').append(q(fields[i])).append(':').append(fields[i + 1]);
        }
        System.out.println(b.append(", \"t\":").append(System.currentTimeMillis() / 1000.0).append('}'));
        System.out.flush();
    }
}
