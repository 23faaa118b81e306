import java.io.IOException;
import java.io.StringReader;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Pattern;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.postgresql.PGConnection;

/**
 * The three jobs written by hand on the Kafka clients: a limit for the
 * workers and for Kafka Streams on the same 2 cores, not a product (at
 * least once, no dead letters, nothing kept of a window across a restart).
 * Two threads, each with a consumer of one group (so each reads half the
 * partitions); after each poll's output is sent (producers flushed) or
 * stored (Postgres committed), its offsets are committed.
 *
 * text-processor: each line lower-cased, split on the same `\W+` (Unicode),
 *   each word sent as key and value with the line's timestamp; lz4, 512 kB
 *   batches, 20 ms linger, as the project's Kafka sink.
 * aggregator: counts per (word, 10 s window of the record's timestamp) in a
 *   map, COPYed each poll into a temporary table and added to
 *   `kafka_limits_counts` in one statement.
 * anomaly-detector: lines holding `login failed`, counted per (user, window)
 *   in a map the threads share; an alert sent as a count passes 50.
 *
 * Environment: KAFKA_BOOTSTRAP, TOPIC_PREFIX, APPLICATION_ID (the group),
 * JDBC_URL for the aggregator. Argument: the job's name.
 */
public final class KafkaClientsLimits {
    private static final Pattern NON_WORD_RUNS = Pattern.compile("\\W+", Pattern.UNICODE_CHARACTER_CLASS);
    private static final long WINDOW_MS = 10_000;
    private static final long EMAIL_THRESHOLD = 50;
    private static final int THREADS = 2;

    interface Job {
        /** Handle one poll's records; return once their output is sent or stored. */
        void handle(ConsumerRecords<byte[], String> records) throws Exception;
    }

    public static void main(String[] args) throws Exception {
        String prefix = System.getenv("TOPIC_PREFIX");
        String job = args[0];
        String input = prefix + switch (job) {
            case "text-processor" -> "textlines";
            case "aggregator" -> "words";
            case "anomaly-detector" -> "loglines";
            default -> throw new IllegalArgumentException("no such job: " + job);
        };
        if (job.equals("aggregator")) {
            try (Connection connection = DriverManager.getConnection(System.getenv("JDBC_URL"))) {
                connection.createStatement().execute(
                    "CREATE TABLE IF NOT EXISTS kafka_limits_counts (word text, window_start bigint, "
                    + "count bigint NOT NULL, PRIMARY KEY (word, window_start))");
            }
        }
        Map<String, Long> shared = new ConcurrentHashMap<>();
        AtomicBoolean stopping = new AtomicBoolean();
        Thread[] threads = new Thread[THREADS];
        List<KafkaConsumer<byte[], String>> consumers = new ArrayList<>();
        for (int n = 0; n < THREADS; n++) {
            KafkaConsumer<byte[], String> consumer = new KafkaConsumer<>(consumerConfig());
            consumers.add(consumer);
            Job handler = switch (job) {
                case "text-processor" -> textProcessor(prefix);
                case "aggregator" -> aggregator();
                default -> anomalyDetector(prefix, shared);
            };
            threads[n] = new Thread(() -> run(consumer, input, handler, stopping));
            threads[n].start();
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping.set(true);
            consumers.forEach(KafkaConsumer::wakeup);
            for (Thread thread : threads) {
                try {
                    thread.join(30_000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }));
        for (Thread thread : threads) {
            thread.join();
        }
    }

    static Properties consumerConfig() {
        Properties config = new Properties();
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, System.getenv("KAFKA_BOOTSTRAP"));
        config.put(ConsumerConfig.GROUP_ID_CONFIG, System.getenv("APPLICATION_ID"));
        config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        config.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10_000);
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        return config;
    }

    static void run(KafkaConsumer<byte[], String> consumer, String input, Job job, AtomicBoolean stopping) {
        try (consumer) {
            consumer.subscribe(List.of(input));
            while (!stopping.get()) {
                ConsumerRecords<byte[], String> records = consumer.poll(Duration.ofMillis(100));
                if (!records.isEmpty()) {
                    job.handle(records);
                    consumer.commitSync();
                }
            }
        } catch (WakeupException e) {
            // the stop
        } catch (Exception e) {  // a failed limit ends: the benchmark sees it
            e.printStackTrace();
            Runtime.getRuntime().halt(1);
        }
    }

    static KafkaProducer<String, String> producer() {
        Properties config = new Properties();
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, System.getenv("KAFKA_BOOTSTRAP"));
        config.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4");
        config.put(ProducerConfig.BATCH_SIZE_CONFIG, 524288);
        config.put(ProducerConfig.LINGER_MS_CONFIG, 20);
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        return new KafkaProducer<>(config);
    }

    static Job textProcessor(String prefix) {
        KafkaProducer<String, String> producer = producer();
        String words = prefix + "words";
        return records -> {
            for (ConsumerRecord<byte[], String> record : records) {
                for (String word : NON_WORD_RUNS.split(record.value().toLowerCase(Locale.ROOT))) {
                    if (!word.isEmpty()) {
                        producer.send(new ProducerRecord<>(words, null, record.timestamp(), word, word));
                    }
                }
            }
            producer.flush();
        };
    }

    static Job aggregator() throws SQLException {
        Connection connection = DriverManager.getConnection(System.getenv("JDBC_URL"));
        connection.setAutoCommit(false);
        try (Statement statement = connection.createStatement()) {
            statement.execute("CREATE TEMPORARY TABLE counts (word text, window_start bigint, count bigint) "
                              + "ON COMMIT DELETE ROWS");
        }
        connection.commit();
        return records -> {
            Map<String, Long> counts = new HashMap<>();
            for (ConsumerRecord<byte[], String> record : records) {
                long windowStart = record.timestamp() - Math.floorMod(record.timestamp(), WINDOW_MS);
                counts.merge(record.value() + "\t" + windowStart, 1L, Long::sum);
            }
            StringBuilder copy = new StringBuilder();  // the backlog's words need no COPY escapes
            counts.forEach((wordAndWindow, count) -> copy.append(wordAndWindow).append('\t').append(count).append('\n'));
            try {
                connection.unwrap(PGConnection.class).getCopyAPI()
                    .copyIn("COPY counts FROM STDIN", new StringReader(copy.toString()));
            } catch (IOException e) {
                throw new SQLException(e);
            }
            try (Statement statement = connection.createStatement()) {
                statement.execute("INSERT INTO kafka_limits_counts SELECT * FROM counts ON CONFLICT (word, window_start) "
                                  + "DO UPDATE SET count = kafka_limits_counts.count + excluded.count");
            }
            connection.commit();
        };
    }

    static Job anomalyDetector(String prefix, Map<String, Long> counts) {
        KafkaProducer<String, String> producer = producer();
        String alerts = prefix + "alerts";
        return records -> {
            for (ConsumerRecord<byte[], String> record : records) {
                String line = record.value();
                if (!line.contains("login failed")) {
                    continue;
                }
                String user = KafkaStreamsPeers.userId(line);
                long windowStart = record.timestamp() - Math.floorMod(record.timestamp(), WINDOW_MS);
                if (!user.isEmpty() && counts.merge(user + "\t" + windowStart, 1L, Long::sum) == EMAIL_THRESHOLD + 1) {
                    producer.send(new ProducerRecord<>(alerts, user, String.format(
                        "{\"user\": \"%s\", \"window_start\": %d, \"count\": %d}", user, windowStart,
                        EMAIL_THRESHOLD + 1)));
                }
            }
            producer.flush();
        };
    }
}
