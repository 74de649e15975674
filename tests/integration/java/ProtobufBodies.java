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
            System.out.println(Base64.getEncoder().encodeToString(builder.build().toByteArray()));
        }
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
