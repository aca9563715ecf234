import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;

import org.apache.kafka.common.utils.Utils;

/**
 * Kafka's own answer for where a keyed record goes: for each line of standard input (a
 * key in hex; an empty line is the empty key) prints "murmur2 partition", the partition
 * being Utils.toPositive(Utils.murmur2(key)) % numPartitions as in the Java producer's
 * built-in partitioner. Usage: java -cp KAFKA_LIBS/'*' KeyPartitions.java NUM_PARTITIONS
 */
public class KeyPartitions {
    public static void main(String[] args) throws IOException {
        int numPartitions = Integer.parseInt(args[0]);
        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) {
            byte[] key = HexFormat.of().parseHex(line.trim());
            int hash = Utils.murmur2(key);
            out.append(hash).append(' ').append(Utils.toPositive(hash) % numPartitions)
               .append('\n');
        }
        System.out.print(out);
    }
}
