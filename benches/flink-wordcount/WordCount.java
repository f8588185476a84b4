// Word count and keyed count in Flink 2.3's DataStream API: the Flink side
// of benches/flink-wordcount/run.sh (issue 11).
//
//   javac -cp "$FLINK_HOME/lib/*" -d CLASSES WordCount.java
//   java <add-opens of conf/config.yaml> -cp "CLASSES:$FLINK_HOME/lib/*" \
//       WordCount words|keys INPUT [--backend hashmap|rocksdb] [--parallelism N] [--out FILE]
//
// INPUT is a file or a folder of files, read by FileSource with
// TextLineInputFormat (UTF-8 lines). `words` splits each line into words
// exactly as Weir's `udfs/tokenize` operator does (split on every code point
// that is not Rust's `char::is_alphanumeric`, drop empty pieces, lowercase);
// `keys` takes each line as it is as the key. Then keyBy the word (key), a
// KeyedProcessFunction keeps the count in a ValueState<Long> and emits
// "{key}\t{count}" on every record, as Weir's `word-count` with
// emit = "updates", into a DiscardingSink. With --out the updates are
// collected and written to FILE instead, one per line (a check, not a
// measurement).
//
// A local MiniCluster in streaming mode, parallelism N (default 1), the
// state backend chosen by state.backend.type (default rocksdb), no
// checkpoints, every other setting Flink's default.
//
// Prints one line:
//   FLINK mode=M backend=B parallelism=N emitted=E keys=K job_ms=... net_ms=... cpu_ms=... jvm_cpu_ms=...
// emitted: the updates the count emitted (an accumulator); keys: the
// distinct keys (updates with count 1); job_ms: execute() to the job's end
// (MiniCluster start, run, shutdown); net_ms: the job's net runtime as
// Flink reports it; cpu_ms: the process's CPU time over job_ms;
// jvm_cpu_ms: the process's CPU time from JVM start.

import java.io.BufferedWriter;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Locale;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.accumulators.LongCounter;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.CloseableIterator;
import org.apache.flink.util.Collector;

public class WordCount {
    /** Weir's `udfs/tokenize` with lowercase = true. */
    public static final class Tokenize implements FlatMapFunction<String, String> {
        @Override
        public void flatMap(String line, Collector<String> out) {
            int n = line.length();
            int start = -1;
            for (int i = 0; i < n; ) {
                int cp = line.codePointAt(i);
                if (isAlphanumeric(cp)) {
                    if (start < 0) {
                        start = i;
                    }
                } else if (start >= 0) {
                    out.collect(lower(line.substring(start, i)));
                    start = -1;
                }
                i += Character.charCount(cp);
            }
            if (start >= 0) {
                out.collect(lower(line.substring(start, n)));
            }
        }

        /**
         * Rust's `char::is_alphanumeric`: the Unicode Alphabetic property,
         * or general category Nd, Nl or No.
         */
        static boolean isAlphanumeric(int cp) {
            if (cp < 0x80) {
                return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9');
            }
            if (Character.isAlphabetic(cp)) {
                return true;
            }
            int t = Character.getType(cp);
            return t == Character.DECIMAL_DIGIT_NUMBER
                    || t == Character.LETTER_NUMBER
                    || t == Character.OTHER_NUMBER;
        }

        /**
         * ASCII lowercasing for ASCII words, full Unicode lowercasing (final
         * sigma included) otherwise, as `str::to_lowercase`; Locale.ROOT does
         * both.
         */
        static String lower(String word) {
            return word.toLowerCase(Locale.ROOT);
        }
    }

    /** A ValueState<Long> count per key; emits every update. */
    public static final class Count extends KeyedProcessFunction<String, String, String> {
        private transient ValueState<Long> count;
        private final LongCounter emitted = new LongCounter();
        private final LongCounter keys = new LongCounter();

        @Override
        public void open(OpenContext ctx) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
            getRuntimeContext().addAccumulator("emitted", emitted);
            getRuntimeContext().addAccumulator("keys", keys);
        }

        @Override
        public void processElement(String key, Context ctx, Collector<String> out) throws Exception {
            Long previous = count.value();
            long c = previous == null ? 1 : previous + 1;
            count.update(c);
            out.collect(key + "\t" + c);
            emitted.add(1L);
            if (c == 1) {
                keys.add(1L);
            }
        }
    }

    static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean)
                        ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2 || !(args[0].equals("words") || args[0].equals("keys"))) {
            System.err.println(
                    "usage: WordCount words|keys INPUT [--backend hashmap|rocksdb]"
                            + " [--parallelism N] [--out FILE]");
            System.exit(2);
        }
        String mode = args[0];
        String input = args[1];
        String backend = "rocksdb";
        int parallelism = 1;
        String outFile = null;
        for (int i = 2; i < args.length; i++) {
            switch (args[i]) {
                case "--backend":
                    backend = args[++i];
                    break;
                case "--parallelism":
                    parallelism = Integer.parseInt(args[++i]);
                    break;
                case "--out":
                    outFile = args[++i];
                    break;
                default:
                    throw new IllegalArgumentException(args[i]);
            }
        }
        if (!backend.equals("hashmap") && !backend.equals("rocksdb")) {
            throw new IllegalArgumentException("--backend: hashmap or rocksdb, not " + backend);
        }

        Configuration conf = new Configuration();
        conf.setString("execution.runtime-mode", "STREAMING");
        conf.setString("parallelism.default", Integer.toString(parallelism));
        conf.setString("state.backend.type", backend);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(parallelism);

        FileSource<String> source =
                FileSource.forRecordStreamFormat(new TextLineInputFormat(), new Path(input)).build();
        DataStream<String> lines =
                env.fromSource(source, WatermarkStrategy.noWatermarks(), "lines");
        DataStream<String> keyed =
                mode.equals("words")
                        ? lines.flatMap(new Tokenize()).name("tokenize")
                        : lines;
        DataStream<String> updates =
                keyed.keyBy(k -> k, Types.STRING).process(new Count()).name("count");

        long cpu0 = cpuNanos();
        long t0 = System.nanoTime();
        JobExecutionResult result;
        if (outFile == null) {
            updates.sinkTo(new DiscardingSink<>()).name("blackhole");
            result = env.execute("flink-" + mode + "-count");
        } else {
            try (BufferedWriter w =
                            Files.newBufferedWriter(Paths.get(outFile), StandardCharsets.UTF_8);
                    CloseableIterator<String> it = updates.executeAndCollect("flink-" + mode + "-count")) {
                while (it.hasNext()) {
                    w.write(it.next());
                    w.write('\n');
                }
            }
            result = null;
        }
        long t1 = System.nanoTime();
        long cpu1 = cpuNanos();
        Object emitted = result == null ? -1L : result.getAccumulatorResult("emitted");
        Object keys = result == null ? -1L : result.getAccumulatorResult("keys");
        System.out.printf(
                "FLINK mode=%s backend=%s parallelism=%d emitted=%d keys=%d job_ms=%d net_ms=%d cpu_ms=%d jvm_cpu_ms=%d%n",
                mode,
                backend,
                parallelism,
                emitted == null ? 0L : (Long) emitted,
                keys == null ? 0L : (Long) keys,
                (t1 - t0) / 1_000_000,
                result == null ? -1L : result.getNetRuntime(),
                (cpu1 - cpu0) / 1_000_000,
                cpu1 / 1_000_000);
        System.exit(0);
    }
}
