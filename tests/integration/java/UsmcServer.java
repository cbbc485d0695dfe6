// Servers for test_java.py: one JVM, three listeners on HOST (127.0.0.1, or
// :: for dual-stack wildcard listeners).
//
//   java UsmcServer HOST BLOCKING_PORT NIO_PORT ASYNC_PORT HTTP_PORT
//
// BLOCKING_PORT: java.net.ServerSocket, one thread per connection.  The
// client's first line is a command (read byte by byte, so nothing after it
// is consumed):
//   ECHO             echo every byte until EOF, then shutdownOutput, close
//   SINK             read until EOF, answer "<bytes> <crc32>\n", close
//   WAIT tag         read until EOF or an exception; store the outcome
//   SLOWREAD tag     sleep 1.5 s, then like WAIT (the client blocks in write)
//   FLOOD tag        write the pattern until an exception; store it
//   HALF tag         shutdownOutput at once, then like WAIT
//   RST              SO_LINGER 0 and close at once (a reset)
//   UNREAD           sleep 0.2 s and close with unread data (a reset)
//   SEND n           send n pattern bytes, then like WAIT (tag "send")
//   OPTS             answer the accepted socket's options and peer port
//   SPAWN            run sh -c 'echo spawned; exit 3' (ProcessBuilder) while
//                    other connections are open; answer "rc=3 out=spawned"
//   RESULT tag       answer the stored outcome of tag (waits up to 10 s)
//   CLOSEREAD tag    block in read; another thread closes the socket after
//                    0.3 s; store how the read ended
// NIO_PORT: a Selector echo server (non-blocking, one thread): echoes every
// byte, half-closes after the client's EOF and closes.
// ASYNC_PORT: an AsynchronousServerSocketChannel echo server (the same).
// HTTP_PORT: com.sun.net.httpserver: POST /x answers "<path> <bytes> <crc32>"
// of the request body; GET /big?n answers n pattern bytes.
//
// Backlogs are 1100: 1000 connections may wait at once (a full accept
// queue sends a connection to TCP under usmc: backlog_full).
// Prints "listening" once all four listen.  Everything it reports goes
// back over connections (RESULT), so its own output is only diagnostics.
import java.io.*;
import java.net.*;
import java.nio.ByteBuffer;
import java.nio.channels.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import java.util.zip.CRC32;

public class UsmcServer {
    static final Map<String, String> results = new ConcurrentHashMap<>();

    static byte pat(long i) { return (byte) (i % 251); }

    static String exc(Throwable t) {
        return t.getClass().getName() + ": " + t.getMessage();
    }

    static String readLine(InputStream in) throws IOException {
        StringBuilder sb = new StringBuilder();
        for (;;) {
            int c = in.read();
            if (c < 0 || c == '\n')
                return sb.toString();
            sb.append((char) c);
        }
    }

    static void put(String tag, String v) {
        synchronized (results) {
            results.put(tag, v);
            results.notifyAll();
        }
    }

    static String get(String tag) throws InterruptedException {
        long end = System.nanoTime() + 10_000_000_000L;
        synchronized (results) {
            while (!results.containsKey(tag)) {
                long left = (end - System.nanoTime()) / 1_000_000;
                if (left <= 0)
                    return "NO RESULT";
                results.wait(left);
            }
            return results.remove(tag);
        }
    }

    // Read until EOF or an exception: "bytes=N end=EOF" or "bytes=N end=<exc>".
    static String drain(InputStream in) {
        long n = 0;
        byte[] b = new byte[65536];
        try {
            for (;;) {
                int r = in.read(b);
                if (r < 0)
                    return "bytes=" + n + " end=EOF";
                n += r;
            }
        } catch (IOException e) {
            return "bytes=" + n + " end=" + exc(e);
        }
    }

    static void serve(Socket s) {
        try {
            InputStream in = s.getInputStream();
            OutputStream out = s.getOutputStream();
            String line = readLine(in);
            String[] w = line.split(" ");
            switch (w[0]) {
            case "ECHO": {
                byte[] b = new byte[65536];
                int r;
                while ((r = in.read(b)) > 0)
                    out.write(b, 0, r);
                s.shutdownOutput();
                break;
            }
            case "SINK": {
                CRC32 crc = new CRC32();
                long n = 0;
                byte[] b = new byte[65536];
                int r;
                while ((r = in.read(b)) > 0) {
                    crc.update(b, 0, r);
                    n += r;
                }
                out.write((n + " " + Long.toHexString(crc.getValue()) + "\n")
                          .getBytes(StandardCharsets.US_ASCII));
                break;
            }
            case "WAIT":
                put(w[1], drain(in));
                break;
            case "SLOWREAD":
                Thread.sleep(1500);
                put(w[1], drain(in));
                break;
            case "FLOOD": {
                byte[] b = new byte[65536];
                for (int i = 0; i < b.length; i++)
                    b[i] = pat(i);
                try {
                    for (;;)
                        out.write(b);
                } catch (IOException e) {
                    put(w[1], "end=" + e.getClass().getName());
                }
                break;
            }
            case "HALF":
                s.shutdownOutput();
                put(w[1], drain(in));
                break;
            case "RST":
                s.setSoLinger(true, 0);
                break;
            case "UNREAD":
                Thread.sleep(200);
                break;
            case "SEND": {
                int n = Integer.parseInt(w[1]);
                byte[] b = new byte[n];
                for (int i = 0; i < n; i++)
                    b[i] = pat(i);
                out.write(b);
                put("send", drain(in));
                break;
            }
            case "OPTS": {
                String o = "nodelay=" + s.getTcpNoDelay() + " keepalive=" + s.getKeepAlive()
                    + " linger=" + s.getSoLinger() + " oobinline=" + s.getOOBInline()
                    + " rcvbuf=" + s.getReceiveBufferSize() + " peerport=" + s.getPort()
                    + " local=" + s.getLocalAddress().getHostAddress() + "\n";
                out.write(o.getBytes(StandardCharsets.US_ASCII));
                drain(in);
                break;
            }
            case "SPAWN": {
                Process pr = new ProcessBuilder("/bin/sh", "-c", "echo spawned; exit 3")
                    .redirectErrorStream(true).start();
                String o = new String(pr.getInputStream().readAllBytes(), StandardCharsets.US_ASCII).trim();
                out.write(("rc=" + pr.waitFor() + " out=" + o + "\n").getBytes(StandardCharsets.US_ASCII));
                break;
            }
            case "RESULT":
                out.write((get(w[1]) + "\n").getBytes(StandardCharsets.US_ASCII));
                break;
            case "CLOSEREAD": {
                Thread closer = new Thread(() -> {
                    try {
                        Thread.sleep(300);
                        s.close();
                    } catch (Exception e) {
                        put(w[1] + "-closer", exc(e));
                    }
                });
                closer.start();
                String how;
                try {
                    int r = in.read();
                    how = "read=" + r;
                } catch (IOException e) {
                    how = exc(e);
                }
                closer.join();
                put(w[1], how + " closed=" + s.isClosed());
                break;
            }
            default:
                System.err.println("unknown command " + line);
            }
        } catch (Exception e) {
            System.err.println("serve: " + exc(e));
        } finally {
            try {
                s.close();
            } catch (IOException e) {
                System.err.println("close: " + exc(e));
            }
        }
    }

    static void blocking(ServerSocket ss) {
        for (;;) {
            try {
                Socket s = ss.accept();
                Thread t = new Thread(() -> serve(s));
                t.setDaemon(true);
                t.start();
            } catch (IOException e) {
                System.err.println("accept: " + exc(e));
                return;
            }
        }
    }

    // Selector echo server: per connection a queue of bytes still to write.
    static class Conn {
        final ArrayDeque<ByteBuffer> pending = new ArrayDeque<>();
        boolean eof;
    }

    static void nio(ServerSocketChannel ssc) throws IOException {
        Selector sel = Selector.open();
        ssc.configureBlocking(false);
        ssc.register(sel, SelectionKey.OP_ACCEPT);
        ByteBuffer buf = ByteBuffer.allocateDirect(1 << 16);
        for (;;) {
            sel.select();
            Iterator<SelectionKey> it = sel.selectedKeys().iterator();
            while (it.hasNext()) {
                SelectionKey k = it.next();
                it.remove();
                try {
                    if (!k.isValid())
                        continue;
                    if (k.isAcceptable()) {
                        SocketChannel c;
                        while ((c = ssc.accept()) != null) {
                            c.configureBlocking(false);
                            c.register(sel, SelectionKey.OP_READ, new Conn());
                        }
                        continue;
                    }
                    SocketChannel c = (SocketChannel) k.channel();
                    Conn st = (Conn) k.attachment();
                    if (k.isReadable()) {
                        buf.clear();
                        int r = c.read(buf);
                        if (r < 0) {
                            st.eof = true;
                        } else if (r > 0) {
                            buf.flip();
                            ByteBuffer copy = ByteBuffer.allocate(r);
                            copy.put(buf).flip();
                            st.pending.add(copy);
                        }
                    }
                    while (!st.pending.isEmpty()) {
                        ByteBuffer b = st.pending.peek();
                        c.write(b);
                        if (b.hasRemaining())
                            break;
                        st.pending.poll();
                    }
                    if (st.pending.isEmpty() && st.eof) {
                        c.shutdownOutput();
                        k.cancel();
                        c.close();
                        continue;
                    }
                    // Back-pressure: stop reading while 4 MiB wait to be written.
                    long queued = 0;
                    for (ByteBuffer b : st.pending)
                        queued += b.remaining();
                    int ops = 0;
                    if (!st.eof && queued < (4 << 20))
                        ops |= SelectionKey.OP_READ;
                    if (!st.pending.isEmpty())
                        ops |= SelectionKey.OP_WRITE;
                    k.interestOps(ops);
                } catch (IOException e) {
                    System.err.println("nio: " + exc(e));
                    k.cancel();
                    k.channel().close();
                }
            }
        }
    }

    static void async(AsynchronousServerSocketChannel as) {
        as.accept(null, new CompletionHandler<AsynchronousSocketChannel, Void>() {
            public void completed(AsynchronousSocketChannel c, Void v) {
                as.accept(null, this);
                asyncRead(c, ByteBuffer.allocate(1 << 16));
            }
            public void failed(Throwable t, Void v) {
                System.err.println("async accept: " + exc(t));
            }
        });
    }

    static void asyncRead(AsynchronousSocketChannel c, ByteBuffer b) {
        b.clear();
        c.read(b, null, new CompletionHandler<Integer, Void>() {
            public void completed(Integer r, Void v) {
                try {
                    if (r < 0) {
                        c.shutdownOutput();
                        c.close();
                        return;
                    }
                    b.flip();
                    while (b.hasRemaining())
                        c.write(b).get();
                    asyncRead(c, b);
                } catch (Exception e) {
                    failed(e, null);
                }
            }
            public void failed(Throwable t, Void v) {
                System.err.println("async: " + exc(t));
                try {
                    c.close();
                } catch (IOException e) {
                }
            }
        });
    }

    public static void main(String[] a) throws Exception {
        InetAddress lo = InetAddress.getByName(a[0]);
        a = Arrays.copyOfRange(a, 1, a.length);
        ServerSocket ss = new ServerSocket();
        ss.setReuseAddress(true);
        ss.bind(new InetSocketAddress(lo, Integer.parseInt(a[0])), 1100);
        ServerSocketChannel ssc = ServerSocketChannel.open();
        ssc.setOption(StandardSocketOptions.SO_REUSEADDR, true);
        ssc.bind(new InetSocketAddress(lo, Integer.parseInt(a[1])), 1100);
        AsynchronousServerSocketChannel as = AsynchronousServerSocketChannel.open();
        as.setOption(StandardSocketOptions.SO_REUSEADDR, true);
        as.bind(new InetSocketAddress(lo, Integer.parseInt(a[2])), 1100);
        Thread tb = new Thread(() -> blocking(ss));
        tb.start();
        Thread tn = new Thread(() -> {
            try {
                nio(ssc);
            } catch (IOException e) {
                System.err.println("nio server: " + exc(e));
            }
        });
        tn.start();
        async(as);
        com.sun.net.httpserver.HttpServer hs = com.sun.net.httpserver.HttpServer.create(
            new InetSocketAddress(lo, Integer.parseInt(a[3])), 1100);
        hs.createContext("/", ex -> {
            byte[] body = ex.getRequestBody().readAllBytes();
            byte[] reply;
            if (ex.getRequestMethod().equals("GET")) {
                int n = Integer.parseInt(ex.getRequestURI().getQuery());
                reply = new byte[n];
                for (int i = 0; i < n; i++)
                    reply[i] = pat(i);
            } else {
                CRC32 crc = new CRC32();
                crc.update(body);
                reply = (ex.getRequestURI().getPath() + " " + body.length + " "
                         + Long.toHexString(crc.getValue())).getBytes(StandardCharsets.US_ASCII);
            }
            ex.sendResponseHeaders(200, reply.length);
            try (OutputStream o = ex.getResponseBody()) {
                o.write(reply);
            }
        });
        hs.setExecutor(Executors.newFixedThreadPool(4));
        hs.start();
        System.out.println("listening");
        tb.join();
    }
}
