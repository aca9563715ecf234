import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.config.ConfigDef;
import java.util.*;
public class DumpProducerConfig {
  public static void main(String[] a) {
    ConfigDef def = ProducerConfig.configDef();
    for (ConfigDef.ConfigKey k : new TreeMap<>(def.configKeys()).values()) {
      Object d = k.defaultValue;
      String s;
      if (d == ConfigDef.NO_DEFAULT_VALUE) s = "<NO_DEFAULT>";
      else if (d == null) s = "<null>";
      else if (d instanceof List) { StringBuilder b = new StringBuilder(); for (Object o : (List<?>) d) { if (b.length()>0) b.append(','); b.append(o instanceof Class ? ((Class<?>)o).getName() : o); } s = b.toString(); }
      else if (d instanceof Class) s = ((Class<?>) d).getName();
      else s = d.toString();
      System.out.println(k.name + "\t" + k.type + "\t" + s + "\t" + k.importance);
    }
  }
}
