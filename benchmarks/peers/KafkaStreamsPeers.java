import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Timestamp;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.regex.Pattern;

import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;

/**
 * The three workers' topologies on Kafka Streams, as Heroku's Kafka Streams
 * example shapes them: the peer `make bench`'s kafka_streams case starts cold
 * on the same backlogs as cold_start (benchmarks/kafka_streams.py). Two
 * stream threads; windows of 10 s by the records' timestamps.
 *
 * PEER_TUNING chooses the peer. `seed` (the default): the seed's shape, at
 * least once, offsets committed each second, the aggregator upserting each
 * count it emits into Postgres, one statement a record. `tuned`: Kafka
 * Streams at its best for these jobs: exactly once (v2), its producers
 * batching and compressing as the project's Kafka sink does (lz4, 512 kB
 * batches, 20 ms linger), the aggregator keeping each window's latest count
 * and upserting them every 500 ms in one batched statement.
 *
 * Environment: KAFKA_BOOTSTRAP, TOPIC_PREFIX, APPLICATION_ID, STATE_DIR,
 * PEER_TUNING, and JDBC_URL for the aggregator. Argument: text-processor,
 * aggregator or anomaly-detector.
 */
public final class KafkaStreamsPeers {
    private static final Pattern NON_WORD_RUNS = Pattern.compile("\\W+", Pattern.UNICODE_CHARACTER_CLASS);
    private static final Duration WINDOW = Duration.ofSeconds(10);
    private static final Duration GRACE = Duration.ofDays(1);
    private static final Duration UPSERT_EVERY = Duration.ofMillis(500);
    private static final long EMAIL_THRESHOLD = 50;
    private static final String UPSERT = "INSERT INTO kafka_streams_counts (word, window_start, count) VALUES (?, ?, ?) "
        + "ON CONFLICT (word, window_start) DO UPDATE SET count = excluded.count";

    public static void main(String[] args) throws InterruptedException {
        String prefix = System.getenv("TOPIC_PREFIX");
        boolean tuned = "tuned".equals(System.getenv("PEER_TUNING"));
        StreamsBuilder builder = new StreamsBuilder();
        switch (args[0]) {
            case "text-processor" -> textProcessor(builder, prefix);
            case "aggregator" -> aggregator(builder, prefix, System.getenv("JDBC_URL"), tuned);
            case "anomaly-detector" -> anomalyDetector(builder, prefix);
            default -> throw new IllegalArgumentException("no such worker: " + args[0]);
        }
        Properties config = new Properties();
        config.put(StreamsConfig.APPLICATION_ID_CONFIG, System.getenv("APPLICATION_ID"));
        config.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, System.getenv("KAFKA_BOOTSTRAP"));
        config.put(StreamsConfig.STATE_DIR_CONFIG, System.getenv("STATE_DIR"));
        config.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
        if (tuned) {  // its own commit interval: 100 ms under exactly once
            config.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
            config.put(StreamsConfig.producerPrefix(ProducerConfig.COMPRESSION_TYPE_CONFIG), "lz4");
            config.put(StreamsConfig.producerPrefix(ProducerConfig.BATCH_SIZE_CONFIG), 524288);
            config.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 20);
        } else {
            config.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
            config.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);
        }
        KafkaStreams streams = new KafkaStreams(builder.build(), config);
        streams.setUncaughtExceptionHandler(error -> {  // a failed peer ends: the benchmark sees it
            error.printStackTrace();
            Runtime.getRuntime().halt(1);
            return null;
        });
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            stopped.countDown();
        }));
        streams.start();
        stopped.await();
    }

    /** textlines -> lower-cased, Unicode-aware tokens -> words (key and value the word). */
    static void textProcessor(StreamsBuilder builder, String prefix) {
        builder.stream(prefix + "textlines", Consumed.with(Serdes.ByteArray(), Serdes.String()))
            .flatMap((key, line) -> {
                List<KeyValue<String, String>> words = new ArrayList<>();
                for (String word : NON_WORD_RUNS.split(line.toLowerCase(Locale.ROOT))) {
                    if (!word.isEmpty()) {
                        words.add(KeyValue.pair(word, word));
                    }
                }
                return words;
            })
            .to(prefix + "words", Produced.with(Serdes.String(), Serdes.String()));
    }

    /** words -> counts per word per 10-second window -> Postgres: one upsert a
     * count emitted, or (tuned) each window's latest count every 500 ms, batched. */
    static void aggregator(StreamsBuilder builder, String prefix, String jdbcUrl, boolean tuned) {
        try (Connection connection = DriverManager.getConnection(jdbcUrl)) {  // once: two at once can collide
            connection.createStatement().execute(
                "CREATE TABLE IF NOT EXISTS kafka_streams_counts (word text, window_start timestamptz, "
                + "count bigint NOT NULL, PRIMARY KEY (word, window_start))");
        } catch (SQLException e) {
            throw new IllegalStateException(e);
        }
        var counts = builder.stream(prefix + "words", Consumed.with(Serdes.String(), Serdes.String()))
            .groupByKey()
            .windowedBy(TimeWindows.ofSizeAndGrace(WINDOW, GRACE))
            .count()
            .toStream();
        if (tuned) {
            counts.process(() -> new BatchedUpserts(jdbcUrl));
            return;
        }
        ThreadLocal<PreparedStatement> upserts = ThreadLocal.withInitial(() -> upsert(jdbcUrl));
        counts.foreach((Windowed<String> window, Long count) -> {
            PreparedStatement statement = upserts.get();
            try {
                bind(statement, window, count);
                statement.executeUpdate();
            } catch (SQLException e) {
                throw new IllegalStateException(e);
            }
        });
    }

    static void bind(PreparedStatement upsert, Windowed<String> window, long count) throws SQLException {
        upsert.setString(1, window.key());
        upsert.setTimestamp(2, new Timestamp(window.window().start()));
        upsert.setLong(3, count);
    }

    static PreparedStatement upsert(String jdbcUrl) {
        try {
            return DriverManager.getConnection(jdbcUrl).prepareStatement(UPSERT);
        } catch (SQLException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Each window's latest count, upserted every 500 ms of wall time in one batched statement. */
    static final class BatchedUpserts implements Processor<Windowed<String>, Long, Void, Void> {
        private final String jdbcUrl;
        private final Map<Windowed<String>, Long> latest = new HashMap<>();
        private PreparedStatement statement;

        BatchedUpserts(String jdbcUrl) {
            this.jdbcUrl = jdbcUrl;
        }

        @Override
        public void init(ProcessorContext<Void, Void> context) {
            statement = upsert(jdbcUrl);
            context.schedule(UPSERT_EVERY, PunctuationType.WALL_CLOCK_TIME, now -> flush());
        }

        @Override
        public void process(Record<Windowed<String>, Long> record) {
            latest.put(record.key(), record.value());
        }

        private void flush() {
            if (latest.isEmpty()) {
                return;
            }
            try {
                for (Map.Entry<Windowed<String>, Long> count : latest.entrySet()) {
                    bind(statement, count.getKey(), count.getValue());
                    statement.addBatch();
                }
                statement.executeBatch();
            } catch (SQLException e) {
                throw new IllegalStateException(e);
            }
            latest.clear();
        }

        @Override
        public void close() {
            flush();
        }
    }

    /** loglines -> failed logins per user per 10-second window -> alerts above the email threshold. */
    static void anomalyDetector(StreamsBuilder builder, String prefix) {
        builder.stream(prefix + "loglines", Consumed.with(Serdes.ByteArray(), Serdes.String()))
            .filter((key, line) -> line.contains("login failed"))
            .selectKey((key, line) -> userId(line))
            .filter((user, line) -> !user.isEmpty())
            .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
            .windowedBy(TimeWindows.ofSizeAndGrace(WINDOW, GRACE))
            .count()
            .toStream()
            .filter((window, count) -> count > EMAIL_THRESHOLD)
            .map((window, count) -> KeyValue.pair(window.key(), String.format(
                "{\"user\": \"%s\", \"window_start\": %d, \"count\": %d}",
                window.key(), window.window().start(), count)))
            .to(prefix + "alerts", Produced.with(Serdes.String(), Serdes.String()));
    }

    static String userId(String line) {
        int bar = line.indexOf('|');
        String field = (bar < 0 ? line : line.substring(0, bar)).trim();
        return field.startsWith("user_id:") ? field.substring("user_id:".length()).trim() : field;
    }
}
