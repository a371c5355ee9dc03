// Transactional producers of Apache Kafka's Java client (kafka-clients) for bench/run.sh's
// `failover` scenario: the same loop as bench/failover.py's librdkafka producers.
//
//   java -cp CLASSES:JARS/* FailoverProducer BOOTSTRAP TOPIC PRODUCERS ID_PREFIX STOP_FILE MAX_SECONDS [key=value...]
//
// Runs PRODUCERS threads, each its own KafkaProducer with the client's default settings except
// bootstrap.servers and transactional.id (ID_PREFIX-j<i>), plus the key=value settings given.
// Each loops beginTransaction / three records to three partitions / commitTransaction until
// STOP_FILE exists or MAX_SECONDS have passed, and prints on stdout
//
//   commit j<i> <epoch-ms> <seq>                 after every acknowledged commit
//   event j<i> <epoch-ms> <what> <exception>     on every error (abort, new producer, retry)
//
// so that bench/failover.py's `report` computes the commit gaps around the faults as it does
// for librdkafka. On a fatal error (fenced, out of order, or an abort that fails) the thread
// closes its producer and makes a new one with the same transactional.id.

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class FailoverProducer {
    private static final int RECORDS_PER_TXN = 3;

    private static String bootstrap;
    private static String topic;
    private static String idPrefix;
    private static File stopFile;
    private static long deadline;
    private static final List<String[]> EXTRA = new ArrayList<>();

    private static synchronized void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static boolean stopping() {
        return stopFile.exists() || System.currentTimeMillis() > deadline;
    }

    private static void event(String name, String what, Throwable e) {
        String msg = e == null ? "" : (e.getClass().getSimpleName() + ": " + e.getMessage());
        // The client wraps what the broker said (e.g. a batch's retriable error) as the cause.
        if (e != null && e.getCause() != null && e.getCause() != e) {
            msg += " (cause " + e.getCause().getClass().getSimpleName() + ": "
                + e.getCause().getMessage() + ")";
        }
        out("event " + name + " " + System.currentTimeMillis() + " " + what + " "
            + msg.replace('\n', ' '));
    }

    private static KafkaProducer<byte[], byte[]> create(String name) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("transactional.id", idPrefix + "-" + name);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        for (String[] kv : EXTRA) {
            props.put(kv[0], kv[1]);
        }
        while (true) {
            KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props);
            try {
                p.initTransactions();
                return p;
            } catch (KafkaException e) {
                event(name, "init-failed", e);
                p.close(Duration.ZERO);
                if (stopping()) {
                    return null;
                }
            }
        }
    }

    private static void run(int index) {
        String name = "j" + index;
        KafkaProducer<byte[], byte[]> p = create(name);
        long seq = 0;
        List<Integer> partitions = new ArrayList<>();
        while (p != null && !stopping()) {
            if (partitions.isEmpty()) {
                try {
                    int n = p.partitionsFor(topic).size();
                    for (int i = 0; i < n; i++) {
                        partitions.add(i);
                    }
                } catch (KafkaException e) {
                    event(name, "metadata-failed", e);
                    continue;
                }
            }
            seq++;
            Collections.shuffle(partitions);
            try {
                p.beginTransaction();
                for (int r = 0; r < RECORDS_PER_TXN; r++) {
                    String value = idPrefix + "-" + name + "-" + seq + "-" + r;
                    p.send(new ProducerRecord<>(topic, partitions.get(r % partitions.size()), null,
                        value.getBytes(StandardCharsets.UTF_8)));
                }
                int tries = 0;
                while (true) {
                    try {
                        p.commitTransaction();
                        break;
                    } catch (TimeoutException e) {
                        // The commit may go on in the background; calling it again waits for it.
                        event(name, "commit-timeout", e);
                        if (++tries >= 3 || stopping()) {
                            throw e;
                        }
                    }
                }
                out("commit " + name + " " + System.currentTimeMillis() + " " + seq);
            } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException e) {
                event(name, "fatal-new-producer", e);
                p.close(Duration.ZERO);
                p = create(name);
            } catch (KafkaException e) {
                event(name, "abort", e);
                try {
                    p.abortTransaction();
                } catch (KafkaException e2) {
                    event(name, "abort-failed-new-producer", e2);
                    p.close(Duration.ZERO);
                    p = create(name);
                }
            }
        }
        if (p != null) {
            p.close(Duration.ofSeconds(5));
        }
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length < 6) {
            System.err.println("usage: FailoverProducer BOOTSTRAP TOPIC PRODUCERS ID_PREFIX STOP_FILE MAX_SECONDS [key=value...]");
            System.exit(2);
        }
        bootstrap = args[0];
        topic = args[1];
        int producers = Integer.parseInt(args[2]);
        idPrefix = args[3];
        stopFile = new File(args[4]);
        deadline = System.currentTimeMillis() + Long.parseLong(args[5]) * 1000;
        for (int i = 6; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq <= 0) {
                System.err.println("not key=value: " + args[i]);
                System.exit(2);
            }
            EXTRA.add(new String[] {args[i].substring(0, eq), args[i].substring(eq + 1)});
        }
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < producers; i++) {
            final int index = i;
            Thread t = new Thread(() -> run(index), "producer-" + i);
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
        out("done");
    }
}
