// Apache Curator's lock recipes (Debian's libcurator-recipes-java), driven
// line by line by the interoperability tests (tests/it/harness/curator.rs).
//
// argv: HOSTS LOG (a lock log file, or `-`). One Curator client, one session.
// Prints `ready` once connected. Then reads commands on stdin, each for a
// named slot; every slot is a thread of its own, since Curator's mutexes
// belong to the thread that acquired them:
//
//   SLOT mutex PATH TIMEOUT ID        InterProcessMutex
//   SLOT read PATH TIMEOUT ID         InterProcessReadWriteLock's read lock
//   SLOT write PATH TIMEOUT ID        InterProcessReadWriteLock's write lock
//   SLOT semaphore PATH N TIMEOUT ID  InterProcessSemaphoreV2 of N leases
//   SLOT release                      releases what SLOT holds
//
// TIMEOUT is milliseconds or `-` (wait for ever). A slot answers
// `SLOT acquired NODE CZXID` once it holds (after appending `start CZXID ID`
// to the log), or `SLOT timeout`; on release it appends `end CZXID ID`,
// releases, and answers `SLOT released`. At EOF the client closes, and with
// its session every node it still holds.

import java.io.BufferedReader;
import java.io.FileWriter;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.utils.ZKPaths;
import org.apache.zookeeper.data.Stat;

public class CuratorLock {
    static CuratorFramework client;
    static String log;
    static final Map<String, LinkedBlockingQueue<String>> slots = new ConcurrentHashMap<>();

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static synchronized void note(String word, long czxid, String id) throws Exception {
        if (log.equals("-")) {
            return;
        }
        try (FileWriter f = new FileWriter(log, StandardCharsets.UTF_8, true)) {
            f.write(word + " " + czxid + " " + id + "\n");
        }
    }

    /** The node a mutex holds: InterProcessMutex keeps it behind a protected getter. */
    static String lockPath(InterProcessMutex mutex) throws Exception {
        Method get = InterProcessMutex.class.getDeclaredMethod("getLockPath");
        get.setAccessible(true);
        return (String) get.invoke(mutex);
    }

    public static void main(String[] args) throws Exception {
        log = args[1];
        client = CuratorFrameworkFactory.newClient(args[0], 10000, 10000, new ExponentialBackoffRetry(100, 3));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            System.err.println("curator: no connection to " + args[0]);
            System.exit(2);
        }
        say("ready");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            if (w[1].equals("release")) {
                slots.get(w[0]).put("release");
                continue;
            }
            LinkedBlockingQueue<String> queue = new LinkedBlockingQueue<>();
            slots.put(w[0], queue);
            Thread t = new Thread(() -> {
                try {
                    hold(w, queue);
                } catch (Exception e) {
                    e.printStackTrace();
                    say(w[0] + " error " + e);
                }
            });
            t.setDaemon(true);
            t.start();
        }
        client.close();
        System.exit(0);
    }

    static void hold(String[] w, LinkedBlockingQueue<String> queue) throws Exception {
        String slot = w[0], kind = w[1], path = w[2];
        boolean semaphore = kind.equals("semaphore");
        String timeout = w[semaphore ? 4 : 3], id = w[semaphore ? 5 : 4];
        long ms = timeout.equals("-") ? -1 : Long.parseLong(timeout);
        String node;
        InterProcessMutex mutex = null;
        Lease lease = null;
        if (semaphore) {
            InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(client, path, Integer.parseInt(w[3]));
            lease = ms < 0 ? s.acquire() : s.acquire(ms, TimeUnit.MILLISECONDS);
            if (lease == null) {
                say(slot + " timeout");
                return;
            }
            // A lease's name is its node's name under PATH/leases.
            node = ZKPaths.makePath(path, "leases", lease.getNodeName());
        } else {
            switch (kind) {
                case "mutex": mutex = new InterProcessMutex(client, path); break;
                case "read": mutex = new InterProcessReadWriteLock(client, path).readLock(); break;
                case "write": mutex = new InterProcessReadWriteLock(client, path).writeLock(); break;
                default: throw new IllegalArgumentException(kind);
            }
            if (ms < 0) {
                mutex.acquire();
            } else if (!mutex.acquire(ms, TimeUnit.MILLISECONDS)) {
                say(slot + " timeout");
                return;
            }
            node = lockPath(mutex);
        }
        Stat stat = client.checkExists().forPath(node);
        note("start", stat.getCzxid(), id);
        say(slot + " acquired " + node + " " + stat.getCzxid());
        queue.take();
        note("end", stat.getCzxid(), id);
        if (semaphore) {
            lease.close();
        } else {
            mutex.release();
        }
        say(slot + " released");
    }
}
