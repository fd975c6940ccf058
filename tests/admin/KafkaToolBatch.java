// Runs Kafka's ConsumerGroupCommand once per stdin line inside one JVM, so that the differential tests
// pay for one JVM start instead of one per command.
//
// Input: one command per line, arguments separated by tabs. Output: one line per command,
// "<exit code>\t<base64 stdout>\t<base64 stderr>". Exit.exit() is intercepted to get the exit code; an
// exception escaping main() counts as exit code 1, as it does for the real launcher.
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Base64;

public class KafkaToolBatch {
    static final class Exited extends RuntimeException {
        final int code;

        Exited(int code) {
            super(null, null, false, false);
            this.code = code;
        }
    }

    public static void main(String[] ignored) throws Exception {
        org.apache.kafka.common.utils.Exit.setExitProcedure((code, message) -> {
            throw new Exited(code);
        });
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream results = System.out;
        PrintStream realErr = System.err;
        Base64.Encoder base64 = Base64.getEncoder();
        String line;
        while ((line = in.readLine()) != null) {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            int code = 0;
            try {
                org.apache.kafka.tools.consumer.group.ConsumerGroupCommand.main(line.split("\t", -1));
            } catch (Exited e) {
                code = e.code;
            } catch (Throwable t) {
                t.printStackTrace();
                code = 1;
            }
            System.out.flush();
            System.err.flush();
            System.setOut(results);
            System.setErr(realErr);
            results.println(code + "\t" + base64.encodeToString(out.toByteArray()) + "\t"
                + base64.encodeToString(err.toByteArray()));
            results.flush();
        }
    }
}
