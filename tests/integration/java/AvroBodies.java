import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Base64;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.avro.message.BinaryMessageEncoder;

/**
 * Avro bodies made by Avro's own Java classes, for tests: each stdin line is a record in Avro's JSON encoding of
 * the schema in args[0]; each stdout line is the base64 of its body, encoded as args[1] says: "binary" (the
 * record's binary encoding, GenericDatumWriter) or "single_object" (BinaryMessageEncoder: marker, fingerprint,
 * binary encoding).
 */
public class AvroBodies {
    public static void main(String[] args) throws Exception {
        Schema schema = new Schema.Parser().parse(new File(args[0]));
        boolean singleObject = "single_object".equals(args[1]);
        GenericDatumReader<GenericRecord> reader = new GenericDatumReader<>(schema);
        GenericDatumWriter<GenericRecord> writer = new GenericDatumWriter<>(schema);
        BinaryMessageEncoder<GenericRecord> messages = new BinaryMessageEncoder<>(GenericData.get(), schema);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            if (line.isBlank()) continue;
            GenericRecord record = reader.read(null, DecoderFactory.get().jsonDecoder(schema, line));
            byte[] body;
            if (singleObject) {
                body = messages.encode(record).array();
            } else {
                ByteArrayOutputStream out = new ByteArrayOutputStream();
                BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(out, null);
                writer.write(record, encoder);
                encoder.flush();
                body = out.toByteArray();
            }
            System.out.println(Base64.getEncoder().encodeToString(body));
        }
    }
}
