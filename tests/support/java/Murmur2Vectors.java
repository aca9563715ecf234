// Prints Kafka's own murmur2 results for keys read from stdin, so the tests can
// check aioproducer._native.murmur2 against the Java client bit for bit.
//
// Run (single-file source launch, Java 11+):
//   java -cp "<kafka libs>/*" tests/java/Murmur2Vectors.java [numPartitions...] < keys
//
// Input: one key per line as hex (an empty line is the empty key).
// Output: one line per key: "<hex> <Utils.murmur2(key)> <Utils.toPositive(h) % n>..."
// with one partition column per numPartitions argument (default: 1 2 3 7 12 100 1000).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;

import org.apache.kafka.common.utils.Utils;

public class Murmur2Vectors {
    public static void main(String[] args) throws Exception {
        int[] counts;
        if (args.length == 0) {
            counts = new int[] {1, 2, 3, 7, 12, 100, 1000};
        } else {
            counts = new int[args.length];
            for (int i = 0; i < args.length; i++) {
                counts[i] = Integer.parseInt(args[i]);
            }
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        PrintWriter out = new PrintWriter(System.out);
        String line;
        while ((line = in.readLine()) != null) {
            String hex = line.trim();
            byte[] key = fromHex(hex);
            int h = Utils.murmur2(key);
            StringBuilder sb = new StringBuilder();
            sb.append(hex).append(' ').append(h);
            for (int n : counts) {
                sb.append(' ').append(Utils.toPositive(h) % n);
            }
            out.println(sb);
        }
        out.flush();
    }

    private static byte[] fromHex(String hex) {
        if (hex.length() % 2 != 0) {
            throw new IllegalArgumentException("odd-length hex key: " + hex);
        }
        byte[] out = new byte[hex.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }
}
