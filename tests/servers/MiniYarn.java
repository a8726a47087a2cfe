// A MiniYARNCluster for the tests (tests/servers/yarn.py): one ResourceManager and N NodeManagers in this JVM,
// on free ports, with the default file system given. Once up, its whole configuration is written to the
// path given (renamed into place, so a reader never sees half of it); then it runs until killed.
//   java -cp <minicluster class path>:<this class> MiniYarn <yarn-site.xml> <fs.defaultFS> <node managers>
import java.io.File;
import java.io.FileOutputStream;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

public class MiniYarn {
  public static void main(String[] args) throws Exception {
    YarnConfiguration conf = new YarnConfiguration();
    conf.set("fs.defaultFS", args[1]);
    // the tests' containers are Spark executors on a shared 2-core machine: no memory or disk policing, and
    // the FIFO scheduler, which needs no queue configuration
    conf.set("yarn.nodemanager.vmem-check-enabled", "false");
    conf.set("yarn.nodemanager.pmem-check-enabled", "false");
    conf.set("yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage", "99.9");
    conf.set("yarn.resourcemanager.scheduler.class", "org.apache.hadoop.yarn.server.resourcemanager.scheduler.fifo.FifoScheduler");
    conf.setInt("yarn.nodemanager.resource.memory-mb", 8192);
    // a MiniYARNCluster sizes its NodeManagers by this one instead (4096 by default: room for one executor)
    conf.setInt("yarn.minicluster.yarn.nodemanager.resource.memory-mb", 8192);
    conf.setInt("yarn.scheduler.maximum-allocation-mb", 8192);
    MiniYARNCluster cluster = new MiniYARNCluster("absreplay", Integer.parseInt(args[2]), 1, 1);
    cluster.init(conf);
    cluster.start();
    File tmp = new File(args[0] + ".tmp");
    try (FileOutputStream out = new FileOutputStream(tmp)) {
      cluster.getConfig().writeXml(out);
    }
    if (!tmp.renameTo(new File(args[0]))) {
      throw new IllegalStateException("could not put " + args[0] + " in place");
    }
    Thread.currentThread().join();
  }
}
