// HDFS and YARN for tests, in one JVM: Hadoop's MiniDFSCluster (one name node, one data node) and
// MiniYARNCluster (one ResourceManager, one NodeManager), on loopback, in the working directory.
//
//   java -cp 'LIB/*:CLASSES' HepixMiniYarn CONF_DIR WEBHDFS_PORT NM_MEMORY_MB NM_VCORES
//
// Writes core-site.xml, hdfs-site.xml and yarn-site.xml into CONF_DIR (a HADOOP_CONF_DIR for
// spark-submit: what a client needs to reach HDFS and the ResourceManager), then CONF_DIR/cluster.json
// ({"hdfs": ..., "webhdfs": ..., "rm": ...}) last, as the sign that the clusters are up.  Stops
// both clusters when its standard input closes, or on SIGTERM.  Compiled and run by
// tests/miniyarn.py.
import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

public class HepixMiniYarn {
  private static MiniDFSCluster dfs;
  private static MiniYARNCluster yarn;

  public static void main(String[] args) throws Exception {
    File confDir = new File(args[0]).getAbsoluteFile();
    int webhdfsPort = Integer.parseInt(args[1]);
    int nmMemoryMb = Integer.parseInt(args[2]);
    int nmVcores = Integer.parseInt(args[3]);
    File work = new File(".").getAbsoluteFile();

    Configuration conf = new YarnConfiguration(new HdfsConfiguration());
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(work, "dfs").getPath());
    conf.setInt("dfs.replication", 1);
    conf.set("hadoop.tmp.dir", new File(work, "tmp").getPath());
    yarnSettings(conf, nmMemoryMb, nmVcores);

    Runtime.getRuntime().addShutdownHook(new Thread(HepixMiniYarn::stop));
    dfs = new MiniDFSCluster.Builder(conf).numDataNodes(1).nameNodePort(0).nameNodeHttpPort(webhdfsPort)
        .format(true).build();
    dfs.waitActive();
    String hdfs = dfs.getFileSystem().getUri().toString();
    conf.set("fs.defaultFS", hdfs);

    yarn = new MiniYARNCluster("hepix", 1, 1, 1);
    yarn.init(conf);
    yarn.start();
    Configuration running = yarn.getConfig();
    // start() can return before the ResourceManager has put its real port into the configuration.
    long deadline = System.nanoTime() + 60_000_000_000L;
    while (running.get(YarnConfiguration.RM_ADDRESS).endsWith(":0")) {
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException("the ResourceManager did not bind its address within 60 s");
      }
      Thread.sleep(100);
    }
    if (!yarn.waitForNodeManagersToConnect(60_000)) {
      throw new IllegalStateException("the NodeManager did not register with the ResourceManager within 60 s");
    }
    writeConf(running, confDir);
    String json = String.format("{\"hdfs\": \"%s\", \"webhdfs\": \"http://127.0.0.1:%d\", \"rm\": \"%s\"}%n",
        hdfs, webhdfsPort, running.get(YarnConfiguration.RM_ADDRESS));
    File tmp = new File(confDir, ".cluster.json.tmp");
    Files.write(tmp.toPath(), json.getBytes(StandardCharsets.UTF_8));
    Files.move(tmp.toPath(), new File(confDir, "cluster.json").toPath(), StandardCopyOption.ATOMIC_MOVE);
    System.out.println("hepix mini cluster up: " + json.trim());

    while (System.in.read() != -1) {
      // stop when the parent closes our standard input (or dies)
    }
    stop();
    System.exit(0);
  }

  // What the minicluster lacks or what this machine cannot afford: the capacity scheduler's queue
  // (hadoop-client-minicluster has no capacity-scheduler.xml), small containers, no memory checks
  // (the Python workers of an executor count against its container), no disk-full check.
  private static void yarnSettings(Configuration conf, int nmMemoryMb, int nmVcores) {
    conf.set("yarn.resourcemanager.hostname", "127.0.0.1");
    conf.set("yarn.nodemanager.hostname", "127.0.0.1");
    // Free ports, not Hadoop's fixed defaults: another cluster may run on this machine.
    for (String key : new String[] {"yarn.nodemanager.localizer.address", "yarn.nodemanager.webapp.address",
        "yarn.nodemanager.collector-service.address", "yarn.resourcemanager.webapp.https.address"}) {
      conf.set(key, "127.0.0.1:0");
    }
    conf.set("yarn.scheduler.capacity.root.queues", "default");
    conf.setInt("yarn.scheduler.capacity.root.default.capacity", 100);
    conf.setInt("yarn.scheduler.capacity.root.default.maximum-capacity", 100);
    conf.setFloat("yarn.scheduler.capacity.root.default.user-limit-factor", 1);
    conf.set("yarn.scheduler.capacity.root.default.state", "RUNNING");
    conf.set("yarn.scheduler.capacity.root.default.acl_submit_applications", "*");
    conf.set("yarn.scheduler.capacity.root.default.acl_administer_queue", "*");
    conf.setInt("yarn.scheduler.capacity.node-locality-delay", -1);
    conf.setFloat("yarn.scheduler.capacity.maximum-am-resource-percent", 0.5f);
    conf.setInt("yarn.scheduler.minimum-allocation-mb", 256);
    conf.setInt("yarn.scheduler.maximum-allocation-mb", nmMemoryMb);
    conf.setInt("yarn.scheduler.maximum-allocation-vcores", nmVcores);
    conf.setInt("yarn.nodemanager.resource.memory-mb", nmMemoryMb);
    conf.setInt("yarn.nodemanager.resource.cpu-vcores", nmVcores);
    conf.setBoolean("yarn.nodemanager.vmem-check-enabled", false);
    conf.setBoolean("yarn.nodemanager.pmem-check-enabled", false);
    conf.set("yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage", "100.0");
    // Finished containers' directories go at once (each holds an unpacked environment).
    conf.setInt("yarn.nodemanager.delete.debug-delay-sec", 0);
    // One NodeManager: an application whose executors fail on it must not wait for another node.
    conf.setBoolean("yarn.resourcemanager.am-scheduling.node-blacklisting-enabled", false);
  }

  // What a client and its application master need: the file system, the ResourceManager's addresses
  // and the scheduler's limits.  Not the rest of the running configuration: it holds minicluster
  // internals (a test-only topology mapping class, this JVM's directories) that a client must not load.
  private static final String[][] CLIENT_KEYS = {
    {"core-site.xml", "fs.defaultFS"},
    {"hdfs-site.xml", "dfs.replication", "dfs.namenode.rpc-address", "dfs.namenode.http-address"},
    {"yarn-site.xml", "yarn.resourcemanager.hostname", "yarn.resourcemanager.address",
     "yarn.resourcemanager.scheduler.address", "yarn.resourcemanager.resource-tracker.address",
     "yarn.resourcemanager.admin.address", "yarn.resourcemanager.webapp.address",
     "yarn.scheduler.minimum-allocation-mb", "yarn.scheduler.maximum-allocation-mb",
     "yarn.scheduler.maximum-allocation-vcores", "yarn.nodemanager.resource.memory-mb",
     "yarn.nodemanager.resource.cpu-vcores"},
  };

  private static void writeConf(Configuration running, File confDir) throws Exception {
    confDir.mkdirs();
    for (String[] file : CLIENT_KEYS) {
      Configuration site = new Configuration(false);
      for (int i = 1; i < file.length; i++) {
        String value = running.get(file[i]);
        if (value == null) {
          throw new IllegalStateException(file[i] + " is not set in the running cluster's configuration");
        }
        site.set(file[i], value);
      }
      try (OutputStream out = new FileOutputStream(new File(confDir, file[0]))) {
        site.writeXml(out);
      }
    }
  }

  private static synchronized void stop() {
    if (yarn != null) {
      yarn.stop();
      yarn = null;
    }
    if (dfs != null) {
      dfs.shutdown();
      dfs = null;
    }
  }
}
