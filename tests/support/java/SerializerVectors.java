// Serialized bytes of the Java client's serializers, for tests/unit/test_java_config.py.
// Reads "Type<TAB>value" lines on stdin (Type: String, Integer, Long, Short, Float,
// Double, Boolean, UUID) and prints the hex of what <Type>Serializer writes.
// Run: java -cp 'kafka-libs/*' SerializerVectors.java
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.UUID;
import org.apache.kafka.common.serialization.*;

public class SerializerVectors {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.split("\t", 2);
            byte[] out;
            switch (parts[0]) {
                case "String": out = new StringSerializer().serialize("t", parts[1]); break;
                case "Integer": out = new IntegerSerializer().serialize("t", Integer.parseInt(parts[1])); break;
                case "Long": out = new LongSerializer().serialize("t", Long.parseLong(parts[1])); break;
                case "Short": out = new ShortSerializer().serialize("t", Short.parseShort(parts[1])); break;
                case "Float": out = new FloatSerializer().serialize("t", Float.parseFloat(parts[1])); break;
                case "Double": out = new DoubleSerializer().serialize("t", Double.parseDouble(parts[1])); break;
                case "Boolean": out = new BooleanSerializer().serialize("t", Boolean.parseBoolean(parts[1])); break;
                case "UUID": out = new UUIDSerializer().serialize("t", UUID.fromString(parts[1])); break;
                default: throw new IllegalArgumentException(parts[0]);
            }
            StringBuilder hex = new StringBuilder();
            for (byte b : out) hex.append(String.format("%02x", b));
            System.out.println(hex);
        }
    }
}
