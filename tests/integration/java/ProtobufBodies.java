import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;

import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.util.JsonFormat;

/**
 * Protobuf bodies made by the Java protobuf runtime, for tests: args[0] is a descriptor set (protoc
 * --include_imports --descriptor_set_out), args[1] a message's full name; each stdin line is a message in
 * Protobuf's JSON mapping, and each stdout line the base64 of its binary encoding (DynamicMessage.toByteArray).
 * With args[2] (a schema id) and args[3] (message indexes, dot-separated: "2", "1.0"), each body is framed in
 * Confluent's wire format as its Protobuf serializer frames it: 0x00, the id (4 bytes, big-endian), the index
 * list (a count then each index, zigzag varints; the list [0] as a lone 0), then the message.
 */
public class ProtobufBodies {
    public static void main(String[] args) throws Exception {
        FileDescriptorSet set;
        try (FileInputStream in = new FileInputStream(args[0])) {
            set = FileDescriptorSet.parseFrom(in);
        }
        Map<String, FileDescriptorProto> protos = new HashMap<>();
        for (FileDescriptorProto proto : set.getFileList()) {
            protos.put(proto.getName(), proto);
        }
        Map<String, FileDescriptor> built = new HashMap<>();
        Descriptor descriptor = null;
        for (FileDescriptorProto proto : set.getFileList()) {
            FileDescriptor file = build(proto.getName(), protos, built);
            for (Descriptor message : file.getMessageTypes()) {
                if (message.getFullName().equals(args[1])) {
                    descriptor = message;
                }
            }
        }
        if (descriptor == null) {
            throw new IllegalArgumentException("no message " + args[1] + " in " + args[0]);
        }
        JsonFormat.Parser parser = JsonFormat.parser();
        BufferedReader lines = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = lines.readLine()) != null; ) {
            if (line.isBlank()) continue;
            DynamicMessage.Builder builder = DynamicMessage.newBuilder(descriptor);
            parser.merge(line, builder);
            byte[] body = builder.build().toByteArray();
            if (args.length > 3) {
                body = framed(Integer.parseInt(args[2]), args[3], body);
            }
            System.out.println(Base64.getEncoder().encodeToString(body));
        }
    }

    private static byte[] framed(int schemaId, String indexes, byte[] message) {
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        out.write(0);
        out.writeBytes(java.nio.ByteBuffer.allocate(4).putInt(schemaId).array());
        String[] path = indexes.split("\\.");
        if (path.length == 1 && path[0].equals("0")) {
            out.write(0);
        } else {
            zigzag(out, path.length);
            for (String index : path) zigzag(out, Integer.parseInt(index));
        }
        out.writeBytes(message);
        return out.toByteArray();
    }

    private static void zigzag(java.io.ByteArrayOutputStream out, int value) {
        int v = (value << 1) ^ (value >> 31);
        while ((v & ~0x7F) != 0) {
            out.write((v & 0x7F) | 0x80);
            v >>>= 7;
        }
        out.write(v);
    }

    private static FileDescriptor build(
            String name, Map<String, FileDescriptorProto> protos, Map<String, FileDescriptor> built) throws Exception {
        FileDescriptor done = built.get(name);
        if (done != null) return done;
        FileDescriptorProto proto = protos.get(name);
        FileDescriptor[] dependencies = new FileDescriptor[proto.getDependencyCount()];
        for (int i = 0; i < dependencies.length; i++) {
            dependencies[i] = build(proto.getDependency(i), protos, built);
        }
        FileDescriptor file = FileDescriptor.buildFrom(proto, dependencies);
        built.put(name, file);
        return file;
    }
}
