package dev.engram.opensearch;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.core.LoggerContext;
import org.opensearch.analysis.common.CommonAnalysisPlugin;
import org.opensearch.common.logging.LogConfigurator;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.index.mapper.MapperExtrasPlugin;
import org.opensearch.index.reindex.ReindexPlugin;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.painless.PainlessPlugin;
import org.opensearch.plugins.Plugin;
import org.opensearch.transport.Netty4Plugin;

/**
 * Starts one OpenSearch node for local runs and tests: single-node discovery, loopback only,
 * no security plugin, the modules we need loaded from the classpath (no distribution, no
 * plugins directory, no security manager, no bootstrap checks).
 *
 * <p>Usage: {@code LocalNode --data-dir DIR --http-port P --transport-port T [-E key=value ...]}.
 * Layout under DIR: {@code home/} (path.home, with {@code config/log4j2.properties}),
 * {@code data/} (path.data), {@code logs/} (path.logs, {@code opensearch.log}).
 * SIGTERM closes the node cleanly.
 */
public final class LocalNode {

    static final String NODE_NAME = "engram-local";

    /** The classpath plugins: what a stock distribution ships as modules, minus what we do not use. */
    static final List<Class<? extends Plugin>> PLUGINS = List.of(
        Netty4Plugin.class,
        CommonAnalysisPlugin.class,
        ReindexPlugin.class,
        PainlessPlugin.class,
        MapperExtrasPlugin.class
    );

    /** Node's constructor that takes classpath plugins is protected. */
    static final class PluginNode extends Node {
        PluginNode(Environment environment, Collection<Class<? extends Plugin>> plugins) {
            super(environment, plugins, true);
        }
    }

    private LocalNode() {}

    public static void main(String[] args) throws Exception {
        Path dataDir = null;
        String httpPort = null;
        String transportPort = null;
        Map<String, String> extra = new LinkedHashMap<>();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (i + 1 >= args.length) {
                usage("missing value after " + a);
            }
            String v = args[++i];
            switch (a) {
                case "--data-dir" -> dataDir = Path.of(v).toAbsolutePath().normalize();
                case "--http-port" -> httpPort = v;
                case "--transport-port" -> transportPort = v;
                case "-E" -> {
                    int eq = v.indexOf('=');
                    if (eq <= 0) {
                        usage("-E expects key=value, got " + v);
                    }
                    extra.put(v.substring(0, eq), v.substring(eq + 1));
                }
                default -> usage("unknown argument " + a);
            }
        }
        if (dataDir == null || httpPort == null || transportPort == null) {
            usage("--data-dir, --http-port and --transport-port are required");
        }

        Path home = dataDir.resolve("home");
        Path config = home.resolve("config");
        Path data = dataDir.resolve("data");
        Path logs = dataDir.resolve("logs");
        for (Path p : List.of(config, home.resolve("plugins"), data, logs)) {
            Files.createDirectories(p);
        }
        writeLogConfig(config.resolve("log4j2.properties"));

        Settings.Builder settings = Settings.builder()
            .put("cluster.name", "engram-local")
            .put("node.name", NODE_NAME)
            .put("path.home", home.toString())
            .put("path.data", data.toString())
            .put("path.logs", logs.toString())
            .put("discovery.type", "single-node")
            .put("network.host", "127.0.0.1")
            .put("http.host", "127.0.0.1")
            .put("transport.host", "127.0.0.1")
            .put("http.port", httpPort)
            .put("transport.port", transportPort)
            // Tests may run on a nearly full disk: never go read-only or refuse to allocate.
            .put("cluster.routing.allocation.disk.threshold_enabled", false);
        extra.forEach(settings::put);

        Environment env = InternalSettingsPreparer.prepareEnvironment(
            settings.build(), Map.of(), config, () -> NODE_NAME);
        LogConfigurator.registerErrorListener();
        LogConfigurator.setNodeName(NODE_NAME);
        LogConfigurator.configure(env);

        Node node = new PluginNode(env, PLUGINS);
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
                node.awaitClose(15, TimeUnit.SECONDS);
            } catch (IOException | InterruptedException e) {
                System.err.println("engram-local opensearch: error while closing: " + e);
            } finally {
                closed.countDown();
                LoggerContext ctx = (LoggerContext) LogManager.getContext(false);
                ctx.stop();
            }
        }, "engram-local-shutdown"));

        node.start();
        System.out.println("engram-local opensearch started: http 127.0.0.1:" + httpPort
            + " transport 127.0.0.1:" + transportPort + " data " + dataDir);
        System.out.flush();
        // Node threads are daemons in places; keep the JVM up until the shutdown hook has run.
        closed.await();
    }

    private static void writeLogConfig(Path target) throws IOException {
        try (InputStream in = LocalNode.class.getResourceAsStream("/engram-log4j2.properties")) {
            if (in == null) {
                throw new IOException("engram-log4j2.properties missing from the launcher jar");
            }
            Files.copy(in, target, StandardCopyOption.REPLACE_EXISTING);
        }
    }

    private static void usage(String problem) {
        System.err.println("LocalNode: " + problem);
        System.err.println("usage: LocalNode --data-dir DIR --http-port P --transport-port T [-E key=value ...]");
        System.exit(2);
    }
}
