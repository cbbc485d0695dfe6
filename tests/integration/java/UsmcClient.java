// Client scenarios for test_java.py against UsmcServer.
//
//   java UsmcClient HOST BLOCKING_PORT NIO_PORT ASYNC_PORT HTTP_PORT SCENARIO...
//
// Every scenario prints a deterministic transcript, "scenario: line" (byte
// counts, CRC32s, exception class names and messages), so that a run over
// plain TCP and one under usmc can be compared line by line.  Nothing
// timing-dependent is printed.  A scenario that does not finish within 30 s
// prints "scenario: TIMEOUT", dumps every thread's stack on stderr and
// exits 3; any unexpected exception prints "scenario: FAILED ..." and the
// run goes on.
import java.io.*;
import java.net.*;
import java.nio.ByteBuffer;
import java.nio.channels.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import java.util.zip.CRC32;

public class UsmcClient {
    static InetAddress host;
    static int bport, nport, aport, hport;
    static String cur;

    static synchronized void out(String s) {
        System.out.println(cur + ": " + s);
    }

    // Pattern byte j of a message with seed s.
    static byte pat(long j, int s) { return (byte) ((j + 13L * s) % 251); }

    static byte[] msg(int n, int s) {
        byte[] b = new byte[n];
        for (int j = 0; j < n; j++)
            b[j] = pat(j, s);
        return b;
    }

    static long crc(byte[] b) {
        CRC32 c = new CRC32();
        c.update(b);
        return c.getValue();
    }

    static InetSocketAddress addr(int port) { return new InetSocketAddress(host, port); }

    static String kind(int port) {
        return port == bport ? "blocking" : port == nport ? "nio" : "async";
    }

    // A connected java.net.Socket; the blocking server gets a command line.
    static Socket sock(String cmd) throws IOException {
        Socket s = new Socket();
        s.connect(addr(bport), 10000);
        if (cmd != null)
            s.getOutputStream().write((cmd + "\n").getBytes(StandardCharsets.US_ASCII));
        return s;
    }

    static String result(String tag) throws IOException {
        try (Socket s = sock("RESULT " + tag)) {
            return UsmcServer.readLine(s.getInputStream());
        }
    }

    static int readFully(InputStream in, byte[] b, int off, int len) throws IOException {
        int got = 0;
        while (got < len) {
            int r = in.read(b, off + got, len - got);
            if (r < 0)
                break;
            got += r;
        }
        return got;
    }

    // ------------------------------------------------------------------
    // Non-blocking connect + selector echo of large and small messages.
    static final int[] SIZES = { 1, 7, 100, 4096, 65535, 65536, 65537, 1 << 20,
                                 (3 << 20) + 5, 6 << 20 };

    static void nioEcho(int port) throws Exception {
        out("server " + kind(port));
        try (Selector sel = Selector.open(); SocketChannel c = SocketChannel.open()) {
            c.configureBlocking(false);
            c.setOption(StandardSocketOptions.TCP_NODELAY, true);
            boolean imm = c.connect(addr(port));
            out("connect returned " + imm + " pending " + c.isConnectionPending());
            SelectionKey k = c.register(sel, SelectionKey.OP_CONNECT);
            if (!imm) {
                if (sel.select(10000) == 0)
                    throw new IOException("connect not ready");
                sel.selectedKeys().clear();
                out("connectable " + k.isConnectable() + " finishConnect " + c.finishConnect());
            }
            out("connected " + c.isConnected() + " remote port ok "
                + (((InetSocketAddress) c.getRemoteAddress()).getPort() == port));
            if (port == bport) {
                ByteBuffer h = ByteBuffer.wrap("ECHO\n".getBytes(StandardCharsets.US_ASCII));
                while (h.hasRemaining())
                    c.write(h);
            }
            ByteBuffer in = ByteBuffer.allocateDirect(1 << 18);
            for (int m = 0; m < SIZES.length; m++) {
                int n = SIZES[m];
                byte[] data = msg(n, m);
                ByteBuffer ob = (m % 2 == 0) ? ByteBuffer.wrap(data)
                    : ByteBuffer.allocateDirect(n).put(data).flip();
                long got = 0, bad = -1;
                CRC32 crc = new CRC32();
                k.interestOps(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
                while (got < n) {
                    if (sel.select(10000) == 0)
                        throw new IOException("stalled at " + got + "/" + n);
                    sel.selectedKeys().clear();
                    if (k.isWritable() && ob.hasRemaining()) {
                        c.write(ob);
                        if (!ob.hasRemaining())
                            k.interestOps(SelectionKey.OP_READ);
                    }
                    if (k.isReadable()) {
                        in.clear();
                        int r = c.read(in);
                        if (r < 0)
                            throw new IOException("EOF at " + got + "/" + n);
                        in.flip();
                        while (in.hasRemaining()) {
                            byte b = in.get();
                            if (bad < 0 && b != pat(got, m))
                                bad = got;
                            crc.update(b);
                            got++;
                        }
                    }
                }
                out("echo " + n + " crc " + Long.toHexString(crc.getValue())
                    + (bad < 0 ? " ok" : " MISMATCH at " + bad));
            }
            c.shutdownOutput();
            k.interestOps(SelectionKey.OP_READ);
            long extra = 0;
            for (;;) {
                if (sel.select(10000) == 0)
                    throw new IOException("no EOF");
                sel.selectedKeys().clear();
                in.clear();
                int r = c.read(in);
                if (r < 0)
                    break;
                extra += r;
            }
            out("EOF after shutdownOutput, extra " + extra);
        }
    }

    // java.net.Socket: a writer thread, the reader verifies, then half-close.
    static void blockEcho(int port) throws Exception {
        out("server " + kind(port));
        try (Socket s = new Socket()) {
            s.setTcpNoDelay(true);
            s.connect(addr(port));
            OutputStream os = s.getOutputStream();
            InputStream is = s.getInputStream();
            if (port == bport)
                os.write("ECHO\n".getBytes(StandardCharsets.US_ASCII));
            final int total = (5 << 20) + 17;
            byte[] data = msg(total, 3);
            AtomicReference<String> werr = new AtomicReference<>("none");
            Thread w = new Thread(() -> {
                Random r = new Random(1);
                int off = 0;
                try {
                    while (off < total) {
                        int n = Math.min(total - off, 1 + r.nextInt(r.nextBoolean() ? 100 : 300000));
                        os.write(data, off, n);
                        off += n;
                    }
                    s.shutdownOutput();
                } catch (IOException e) {
                    werr.set(UsmcServer.exc(e));
                }
            });
            w.start();
            byte[] got = new byte[total];
            int n = readFully(is, got, 0, total);
            int after = is.read();
            w.join();
            out("writer " + werr.get() + " outputShutdown " + s.isOutputShutdown());
            out("read " + n + " equal " + Arrays.equals(got, data) + " crc "
                + Long.toHexString(crc(got)) + " then " + after);
        }
    }

    // Gathering write / scattering read on a blocking SocketChannel.
    static void gather() throws Exception {
        try (SocketChannel c = SocketChannel.open(addr(bport))) {
            c.write(ByteBuffer.wrap("ECHO\n".getBytes(StandardCharsets.US_ASCII)));
            byte[] a = msg(100, 1), b = msg(70000, 2), d = msg(3, 3);
            ByteBuffer[] ws = { ByteBuffer.wrap(a), ByteBuffer.allocateDirect(b.length).put(b).flip(),
                                ByteBuffer.wrap(d) };
            long w = 0;
            while (w < 70103)
                w += c.write(ws);
            out("gathered " + w);
            ByteBuffer r1 = ByteBuffer.allocateDirect(50), r2 = ByteBuffer.allocate(70053);
            ByteBuffer[] rs = { r1, r2 };
            long r = 0;
            while (r < 70103) {
                long k = c.read(rs);
                if (k < 0)
                    break;
                r += k;
            }
            r1.flip();
            r2.flip();
            byte[] all = new byte[(int) r];
            r1.get(all, 0, r1.remaining());
            r2.get(all, 50, r2.remaining());
            byte[] want = new byte[70103];
            System.arraycopy(a, 0, want, 0, 100);
            System.arraycopy(b, 0, want, 100, 70000);
            System.arraycopy(d, 0, want, 70100, 3);
            out("scattered " + r + " equal " + Arrays.equals(all, want));
            c.shutdownOutput();
            out("then " + c.read(ByteBuffer.allocate(10)));
        }
    }

    // SINK: half-close, the answer comes after our EOF; writes after it fail.
    static void sink() throws Exception {
        try (Socket s = sock("SINK")) {
            byte[] data = msg((2 << 20) + 3, 5);
            s.getOutputStream().write(data);
            s.shutdownOutput();
            try {
                s.getOutputStream().write(1);
                out("write after shutdownOutput succeeded");
            } catch (IOException e) {
                out("write after shutdownOutput: " + UsmcServer.exc(e));
            }
            String reply = UsmcServer.readLine(s.getInputStream());
            out("reply " + reply + " want " + data.length + " " + Long.toHexString(crc(data)));
            out("then " + s.getInputStream().read());
        }
        // A SocketChannel's write after shutdownOutput.
        try (SocketChannel c = SocketChannel.open(addr(bport))) {
            c.write(ByteBuffer.wrap("SINK\nabc".getBytes(StandardCharsets.US_ASCII)));
            c.shutdownOutput();
            try {
                c.write(ByteBuffer.wrap(new byte[1]));
            } catch (IOException e) {
                out("channel write after shutdownOutput: " + UsmcServer.exc(e));
            }
            ByteBuffer b = ByteBuffer.allocate(100);
            while (c.read(b) >= 0)
                ;
            b.flip();
            out("channel reply " + StandardCharsets.US_ASCII.decode(b).toString().trim());
        }
    }

    // shutdownInput, available() (FIONREAD), SO_TIMEOUT.
    static void inputSide() throws Exception {
        try (Socket s = sock("SEND 1000")) {
            InputStream in = s.getInputStream();
            int first = in.read();
            Thread.sleep(300);
            out("available " + in.available() + " after the first byte " + first);
            byte[] b = new byte[10];
            out("read " + readFully(in, b, 0, 10) + " available " + in.available());
            byte[] rest = new byte[989];
            out("read " + readFully(in, rest, 0, 989) + " available " + in.available());
            s.setSoTimeout(300);
            try {
                out("timed read returned " + in.read());
            } catch (IOException e) {
                out("timed read: " + UsmcServer.exc(e));
            }
            s.setSoTimeout(0);
            s.shutdownInput();
            out("after shutdownInput read " + in.read() + " available " + in.available()
                + " inputShutdown " + s.isInputShutdown());
        }
        out("server saw " + result("send"));
        // The socket adaptor of a blocking SocketChannel: a timed read
        // (poll) with nothing to read, then one that ends at the server's close.
        try (SocketChannel c = SocketChannel.open(addr(bport))) {
            c.write(ByteBuffer.wrap("WAIT ad\n".getBytes(StandardCharsets.US_ASCII)));
            Socket s = c.socket();
            s.setSoTimeout(200);
            try {
                out("adaptor timed read returned " + s.getInputStream().read());
            } catch (IOException e) {
                out("adaptor timed read: " + UsmcServer.exc(e));
            }
            s.setSoTimeout(5000);
            s.shutdownOutput();   // the server sees EOF and closes
            out("adaptor read after the server closed " + s.getInputStream().read()
                + " available " + s.getInputStream().available());
        }
        out("server saw " + result("ad"));
        // shutdownInput before anything arrived, on a SocketChannel.
        try (SocketChannel c = SocketChannel.open(addr(bport))) {
            c.write(ByteBuffer.wrap("SEND 5000\n".getBytes(StandardCharsets.US_ASCII)));
            c.shutdownInput();
            out("channel read after shutdownInput " + c.read(ByteBuffer.allocate(100)));
            // The 5000 bytes arrive meanwhile; closing with them unread resets.
            Thread.sleep(300);
        }
        out("server saw " + result("send"));
    }

    // A read blocked in one thread, the socket closed from another: the
    // JDK's preClose (dup2 of a closed socketpair end over the socket) and
    // a signal to the reader.
    interface Op { void run() throws Exception; }

    static String inThread(Op op, Op afterStart) throws Exception {
        AtomicReference<String> how = new AtomicReference<>("still running");
        Thread t = new Thread(() -> {
            try {
                op.run();
                how.set("returned normally");
            } catch (Throwable e) {
                how.set(UsmcServer.exc(e));
            }
        });
        t.start();
        Thread.sleep(400);
        afterStart.run();
        t.join(10000);
        if (t.isAlive())
            return "STILL BLOCKED";
        return how.get();
    }

    static void closeRead() throws Exception {
        {
            Socket s = sock("WAIT cr1");
            AtomicInteger r = new AtomicInteger(-2);
            out("socket read: " + inThread(() -> r.set(s.getInputStream().read()), s::close)
                + " read=" + r.get());
            out("server saw " + result("cr1"));
        }
        {
            Socket s = sock("WAIT cr2");
            s.setSoTimeout(20000);
            out("socket timed read: " + inThread(() -> s.getInputStream().read(), s::close));
            out("server saw " + result("cr2"));
        }
        {
            SocketChannel c = SocketChannel.open(addr(bport));
            c.write(ByteBuffer.wrap("WAIT cr3\n".getBytes(StandardCharsets.US_ASCII)));
            out("channel read: " + inThread(() -> c.read(ByteBuffer.allocate(10)), c::close));
            out("server saw " + result("cr3"));
        }
        {
            SocketChannel c = SocketChannel.open(addr(bport));
            c.write(ByteBuffer.wrap("WAIT cr4\n".getBytes(StandardCharsets.US_ASCII)));
            Thread[] th = new Thread[1];
            AtomicReference<String> how = new AtomicReference<>("still running");
            th[0] = new Thread(() -> {
                try {
                    c.read(ByteBuffer.allocate(10));
                    how.set("returned normally");
                } catch (Throwable e) {
                    how.set(UsmcServer.exc(e));
                }
            });
            th[0].start();
            Thread.sleep(400);
            th[0].interrupt();
            th[0].join(10000);
            out("channel read interrupted: " + (th[0].isAlive() ? "STILL BLOCKED" : how.get())
                + " open " + c.isOpen());
            out("server saw " + result("cr4"));
        }
        {
            // The read of a stream over a channel (Channels.newInputStream).
            SocketChannel c = SocketChannel.open(addr(bport));
            c.write(ByteBuffer.wrap("WAIT cr5\n".getBytes(StandardCharsets.US_ASCII)));
            InputStream in = Channels.newInputStream(c);
            out("channel stream read: " + inThread(() -> in.read(), c::close));
            out("server saw " + result("cr5"));
        }
        {
            // Closed by the server while its own read is blocked.
            Socket s = sock("CLOSEREAD sr1");
            out("peer closed during its read, we read " + s.getInputStream().read());
            out("server saw " + result("sr1"));
            s.close();
        }
    }

    // A write blocked (the server does not read) closed from another thread.
    static void closeWrite() throws Exception {
        {
            Socket s = sock("SLOWREAD cw1");
            byte[] b = new byte[(1 << 20) + 7];
            out("socket write: " + inThread(() -> {
                for (int i = 0; i < 256; i++)
                    s.getOutputStream().write(b);
            }, s::close));
            out("server saw " + result("cw1").replaceAll("bytes=\\d+", "bytes>0"));
        }
        {
            // Every byte a write() reported written reaches the peer, and
            // no other: the server's count equals the sum of the returns.
            SocketChannel c = SocketChannel.open(addr(bport));
            c.write(ByteBuffer.wrap("SLOWREAD cw2\n".getBytes(StandardCharsets.US_ASCII)));
            ByteBuffer b = ByteBuffer.allocateDirect((1 << 20) + 7);
            AtomicLong wrote = new AtomicLong();
            String how = inThread(() -> {
                for (int i = 0; i < 256; i++) {
                    b.clear();
                    while (b.hasRemaining())
                        wrote.addAndGet(c.write(b));
                }
            }, c::close);
            System.err.println("close_write: channel wrote " + wrote.get() + " " + how);
            String srv = result("cw2");
            out("channel write ended (" + how.replaceAll(":.*", "") + ") server saw "
                + srv.replaceAll("bytes=\\d+", "bytes>0") + " server bytes == client's write total: "
                + srv.startsWith("bytes=" + wrote.get() + " "));
            System.err.println("close_write: server saw " + srv);
        }
    }

    // accept() blocked in one thread, the listener closed from another.
    static void closeAccept() throws Exception {
        {
            ServerSocket ss = new ServerSocket(0, 5, host);
            out("socket accept: " + inThread(() -> ss.accept(), ss::close));
        }
        {
            ServerSocketChannel ssc = ServerSocketChannel.open();
            ssc.bind(new InetSocketAddress(host, 0));
            out("channel accept: " + inThread(() -> ssc.accept(), ssc::close));
        }
        {
            // A listener in this process, a client in this process: one
            // connection accepted, echo a few bytes both ways.
            try (ServerSocket ss = new ServerSocket(0, 5, host);
                 Socket c = new Socket(host, ss.getLocalPort());
                 Socket a = ss.accept()) {
                c.getOutputStream().write(msg(1000, 9));
                byte[] b = new byte[1000];
                out("in-process accepted read " + readFully(a.getInputStream(), b, 0, 1000)
                    + " equal " + Arrays.equals(b, msg(1000, 9)));
                a.close();
                out("in-process after peer close read " + c.getInputStream().read());
            }
        }
    }

    // A non-blocking channel registered with a selector, closed while
    // another thread sits in select().
    static void closeSelect(boolean linger0) throws Exception {
        String tag = linger0 ? "cs2" : "cs1";
        Selector sel = Selector.open();
        SocketChannel c = SocketChannel.open(addr(bport));
        c.write(ByteBuffer.wrap(("WAIT " + tag + "\n").getBytes(StandardCharsets.US_ASCII)));
        if (linger0)
            c.setOption(StandardSocketOptions.SO_LINGER, 0);
        c.configureBlocking(false);
        SelectionKey k = c.register(sel, SelectionKey.OP_READ);
        AtomicInteger n = new AtomicInteger(-1);
        out((linger0 ? "linger0 " : "") + "select: " + inThread(() -> n.set(sel.select()), () -> {
            c.close();
            sel.wakeup();
        }) + " key valid " + k.isValid());
        out("selectNow " + sel.selectNow() + " keys " + sel.keys().size());
        out("server saw " + result(tag));
        sel.close();
    }

    // SO_LINGER 0 (a reset) and close with unread data, each side.
    static void resets() throws Exception {
        {
            Socket s = sock("WAIT l0");
            s.getOutputStream().write(msg(1000, 1));
            Thread.sleep(300);
            s.setSoLinger(true, 0);
            out("linger " + s.getSoLinger());
            s.close();
            out("server saw " + result("l0"));
        }
        {
            Socket s = sock("RST");
            Thread.sleep(300);
            for (int i = 0; i < 2; i++) {
                try {
                    out("read after peer reset " + s.getInputStream().read());
                } catch (IOException e) {
                    out("read after peer reset: " + UsmcServer.exc(e));
                }
            }
            try {
                s.getOutputStream().write(msg(10, 1));
                out("write after peer reset succeeded");
            } catch (IOException e) {
                out("write after peer reset: " + UsmcServer.exc(e));
            }
            s.close();
        }
        {
            SocketChannel c = SocketChannel.open(addr(bport));
            c.write(ByteBuffer.wrap("RST\n".getBytes(StandardCharsets.US_ASCII)));
            Thread.sleep(300);
            for (int i = 0; i < 2; i++) {
                try {
                    out("channel read after peer reset " + c.read(ByteBuffer.allocate(10)));
                } catch (IOException e) {
                    out("channel read after peer reset: " + UsmcServer.exc(e));
                }
            }
            try {
                c.write(ByteBuffer.wrap(msg(10, 1)));
                out("channel write after peer reset succeeded");
            } catch (IOException e) {
                out("channel write after peer reset: " + UsmcServer.exc(e));
            }
            c.close();
        }
        {
            Socket s = sock("UNREAD");
            s.getOutputStream().write(msg(5000, 2));
            Thread.sleep(600);
            try {
                out("read after peer closed with unread data " + s.getInputStream().read());
            } catch (IOException e) {
                out("read after peer closed with unread data: " + UsmcServer.exc(e));
            }
            s.close();
        }
        {
            Socket s = sock("FLOOD fl");
            byte[] b = new byte[10];
            out("flood read " + readFully(s.getInputStream(), b, 0, 10));
            Thread.sleep(200);
            s.close();
            out("server saw " + result("fl"));
        }
        {
            // Non-blocking channel, the peer resets: select reports it readable.
            try (Selector sel = Selector.open(); SocketChannel c = SocketChannel.open(addr(bport))) {
                c.write(ByteBuffer.wrap("RST\n".getBytes(StandardCharsets.US_ASCII)));
                c.configureBlocking(false);
                SelectionKey k = c.register(sel, SelectionKey.OP_READ);
                int n = sel.select(10000);
                out("selected " + n + " readable " + k.isReadable());
                try {
                    out("nio read after peer reset " + c.read(ByteBuffer.allocate(10)));
                } catch (IOException e) {
                    out("nio read after peer reset: " + UsmcServer.exc(e));
                }
            }
        }
    }

    // Socket options: get/set round trips before and after connect.
    static String opts(NetworkChannel c) throws IOException {
        TreeMap<String, Object> m = new TreeMap<>();
        for (SocketOption<?> o : c.supportedOptions()) {
            try {
                m.put(o.name(), c.getOption(o));
            } catch (Exception e) {
                m.put(o.name(), e.getClass().getSimpleName());
            }
        }
        return m.toString();
    }

    @SuppressWarnings("unchecked")
    static void options() throws Exception {
        Map<String, Object> set = new LinkedHashMap<>();
        set.put("TCP_NODELAY", true);
        set.put("SO_KEEPALIVE", true);
        set.put("SO_RCVBUF", 65536);
        set.put("SO_SNDBUF", 32768);
        set.put("SO_LINGER", 5);
        set.put("SO_REUSEADDR", true);
        set.put("IP_TOS", 0x10);
        set.put("TCP_KEEPIDLE", 30);
        set.put("TCP_KEEPINTERVAL", 5);
        set.put("TCP_KEEPCOUNT", 3);
        set.put("TCP_QUICKACK", true);
        set.put("SO_REUSEPORT", false);
        for (int phase = 0; phase < 2; phase++) {
            try (SocketChannel c = SocketChannel.open()) {
                out("defaults unconnected " + opts(c));
                if (phase == 1) {
                    c.connect(addr(bport));
                    c.write(ByteBuffer.wrap("WAIT o1\n".getBytes(StandardCharsets.US_ASCII)));
                    out("defaults connected " + opts(c));
                }
                for (SocketOption<?> o : c.supportedOptions()) {
                    Object v = set.get(o.name());
                    if (v == null)
                        continue;
                    try {
                        c.setOption((SocketOption<Object>) o, v);
                    } catch (Exception e) {
                        out("set " + o.name() + ": " + UsmcServer.exc(e));
                    }
                }
                out("after set " + opts(c));
                if (phase == 0) {
                    c.connect(addr(bport));
                    c.write(ByteBuffer.wrap("WAIT o0\n".getBytes(StandardCharsets.US_ASCII)));
                    out("after connect " + opts(c));
                }
                c.setOption(StandardSocketOptions.SO_LINGER, -1);
            }
            out("server saw " + result(phase == 0 ? "o0" : "o1"));
        }
        // java.net.Socket accessors and the accepted socket's view.
        try (Socket s = new Socket()) {
            s.setReceiveBufferSize(300000);
            s.setOOBInline(true);
            s.connect(addr(bport));
            s.getOutputStream().write("OPTS\n".getBytes(StandardCharsets.US_ASCII));
            String srv = UsmcServer.readLine(s.getInputStream());
            String mine = " peerport=" + s.getLocalPort() + " ";
            out("socket rcvbuf " + s.getReceiveBufferSize() + " sndbuf " + s.getSendBufferSize()
                + " nodelay " + s.getTcpNoDelay() + " oobinline " + s.getOOBInline()
                + " traffic " + s.getTrafficClass() + " keepalive " + s.getKeepAlive()
                + " timeout " + s.getSoTimeout() + " linger " + s.getSoLinger());
            out("accepted " + srv.replace(mine, " peerport=OURS "));
            out("local " + s.getLocalAddress().getHostAddress() + " remote "
                + ((InetSocketAddress) s.getRemoteSocketAddress()).getAddress().getHostAddress()
                + " port ok " + (s.getPort() == bport) + " bound " + s.isBound()
                + " connected " + s.isConnected());
        }
        try (ServerSocketChannel ssc = ServerSocketChannel.open()) {
            out("listener defaults " + opts(ssc));
            ssc.setOption(StandardSocketOptions.SO_RCVBUF, 100000);
            ssc.bind(new InetSocketAddress(host, 0));
            out("listener bound " + opts(ssc));
        }
    }

    // Connect to a port nobody listens on.
    static void refused() throws Exception {
        int port;
        try (ServerSocket ss = new ServerSocket(0, 1, host)) {
            port = ss.getLocalPort();
        }
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(host, port), 5000);
            out("blocking connect succeeded");
        } catch (IOException e) {
            out("blocking connect: " + UsmcServer.exc(e));
        }
        try (Selector sel = Selector.open(); SocketChannel c = SocketChannel.open()) {
            c.configureBlocking(false);
            boolean imm = c.connect(new InetSocketAddress(host, port));
            SelectionKey k = c.register(sel, SelectionKey.OP_CONNECT);
            int n = sel.select(5000);
            out("nio connect returned " + imm + " selected " + n + " connectable " + k.isConnectable());
            try {
                out("finishConnect " + c.finishConnect());
            } catch (IOException e) {
                out("finishConnect: " + UsmcServer.exc(e));
            }
        }
        try (SocketChannel c = SocketChannel.open()) {
            c.connect(new InetSocketAddress(host, port));
        } catch (IOException e) {
            out("channel connect: " + UsmcServer.exc(e));
        }
    }

    // Urgent data (MSG_OOB) in the middle of a stream.
    static void oob() throws Exception {
        try (Socket s = sock("SINK")) {
            OutputStream os = s.getOutputStream();
            byte[] a = msg(300000, 1), b = msg(1000, 2);
            os.write(a);
            s.sendUrgentData(0x41);
            os.write(b);
            s.shutdownOutput();
            CRC32 c = new CRC32();
            c.update(a);
            c.update(b);
            out("reply " + UsmcServer.readLine(s.getInputStream()) + " without the urgent byte "
                + (a.length + b.length) + " " + Long.toHexString(c.getValue()));
        }
        try (Socket s = sock("ECHO")) {
            s.setOOBInline(true);
            OutputStream os = s.getOutputStream();
            os.write(msg(5000, 1));
            s.sendUrgentData(0x41);
            os.write(msg(100, 2));
            s.shutdownOutput();
            ByteArrayOutputStream got = new ByteArrayOutputStream();
            InputStream in = s.getInputStream();
            byte[] buf = new byte[8192];
            int r;
            while ((r = in.read(buf)) > 0)
                got.write(buf, 0, r);
            out("echo of stream with urgent byte: " + got.size() + " crc "
                + Long.toHexString(crc(got.toByteArray())));
        }
    }

    // Many short connections, sequential and in parallel, to all servers.
    static boolean shortOne(int port, int i) {
        try (Socket s = new Socket()) {
            s.connect(addr(port), 10000);
            OutputStream os = s.getOutputStream();
            if (port == bport)
                os.write("ECHO\n".getBytes(StandardCharsets.US_ASCII));
            byte[] d = msg(1 + (i * 37) % 3000, i);
            os.write(d);
            s.shutdownOutput();
            byte[] b = new byte[d.length + 1];
            int n = readFully(s.getInputStream(), b, 0, b.length);
            return n == d.length && Arrays.equals(Arrays.copyOf(b, n), d);
        } catch (IOException e) {
            System.err.println("short connection " + i + ": " + UsmcServer.exc(e));
            return false;
        }
    }

    static void many(int seq, int threads, int per) throws Exception {
        int[] ports = { bport, nport, aport };
        int ok = 0;
        for (int i = 0; i < seq; i++)
            if (shortOne(ports[i % 3], i))
                ok++;
        out("sequential ok " + ok + "/" + seq);
        AtomicInteger pok = new AtomicInteger();
        ExecutorService ex = Executors.newFixedThreadPool(threads);
        List<Future<?>> fs = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int tt = t;
            fs.add(ex.submit(() -> {
                for (int i = 0; i < per; i++)
                    if (shortOne(ports[(tt + i) % 3], 1000 + tt * per + i))
                        pok.incrementAndGet();
            }));
        }
        for (Future<?> f : fs)
            f.get();
        ex.shutdown();
        out("parallel ok " + pok.get() + "/" + threads * per);
    }

    // One selector, many non-blocking connections, several rounds each.
    static void nioMulti(int port, int conns, int rounds, int size) throws Exception {
        out("server " + kind(port));
        try (Selector sel = Selector.open()) {
            class St {
                SocketChannel c;
                int round;
                ByteBuffer out;
                long got;
                boolean bad, done;
            }
            List<St> all = new ArrayList<>();
            for (int i = 0; i < conns; i++) {
                St st = new St();
                st.c = SocketChannel.open();
                st.c.configureBlocking(false);
                st.c.connect(addr(port));
                st.c.register(sel, SelectionKey.OP_CONNECT, st);
                all.add(st);
            }
            ByteBuffer in = ByteBuffer.allocate(1 << 16);
            int finished = 0;
            while (finished < conns) {
                if (sel.select(10000) == 0)
                    throw new IOException("stalled, finished " + finished);
                Iterator<SelectionKey> it = sel.selectedKeys().iterator();
                while (it.hasNext()) {
                    SelectionKey k = it.next();
                    it.remove();
                    St st = (St) k.attachment();
                    int idx = all.indexOf(st);
                    if (k.isConnectable()) {
                        st.c.finishConnect();
                        byte[] hdr = port == bport ? "ECHO\n".getBytes(StandardCharsets.US_ASCII)
                            : new byte[0];
                        st.out = ByteBuffer.allocate(hdr.length + size);
                        st.out.put(hdr).put(msg(size, idx * 100)).flip();
                        k.interestOps(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
                        continue;
                    }
                    if (k.isWritable() && st.out.hasRemaining()) {
                        st.c.write(st.out);
                        if (!st.out.hasRemaining())
                            k.interestOps(SelectionKey.OP_READ);
                    }
                    if (k.isReadable()) {
                        in.clear();
                        int r = st.c.read(in);
                        if (r < 0) {
                            if (st.round == rounds) {
                                st.done = true;
                                finished++;
                                k.cancel();
                                st.c.close();
                            } else {
                                throw new IOException("early EOF on " + idx);
                            }
                            continue;
                        }
                        in.flip();
                        while (in.hasRemaining()) {
                            if (in.get() != pat(st.got, idx * 100 + st.round))
                                st.bad = true;
                            st.got++;
                        }
                        if (st.got == size) {
                            st.round++;
                            st.got = 0;
                            if (st.round < rounds) {
                                st.out = ByteBuffer.wrap(msg(size, idx * 100 + st.round));
                                k.interestOps(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
                            } else {
                                st.c.shutdownOutput();
                            }
                        }
                    }
                }
            }
            int good = 0;
            for (St st : all)
                if (st.done && !st.bad)
                    good++;
            out("connections ok " + good + "/" + conns + " rounds " + rounds + " size " + size);
        }
    }

    // sendfile (FileChannel.transferTo) to a socket, transferFrom back.
    static void transfer() throws Exception {
        Path src = Files.createTempFile("usmc-java", ".src"), dst = Files.createTempFile("usmc-java", ".dst");
        try {
            byte[] data = msg((3 << 20) + 11, 7);
            Files.write(src, data);
            try (SocketChannel c = SocketChannel.open(addr(bport));
                 FileChannel in = FileChannel.open(src, StandardOpenOption.READ);
                 FileChannel outf = FileChannel.open(dst, StandardOpenOption.WRITE)) {
                c.write(ByteBuffer.wrap("ECHO\n".getBytes(StandardCharsets.US_ASCII)));
                AtomicReference<String> werr = new AtomicReference<>("none");
                Thread w = new Thread(() -> {
                    try {
                        long pos = 0;
                        while (pos < data.length)
                            pos += in.transferTo(pos, data.length - pos, c);
                        c.shutdownOutput();
                    } catch (IOException e) {
                        werr.set(UsmcServer.exc(e));
                    }
                });
                w.start();
                long pos = 0;
                for (;;) {
                    long n = outf.transferFrom(c, pos, 1 << 20);
                    if (n <= 0)
                        break;
                    pos += n;
                }
                w.join();
                out("transferTo " + werr.get() + " transferFrom " + pos);
                out("copy equal " + Arrays.equals(Files.readAllBytes(dst), data));
            }
        } finally {
            Files.deleteIfExists(src);
            Files.deleteIfExists(dst);
        }
    }

    // AsynchronousSocketChannel (the JDK's epoll port, EPOLLONESHOT).
    static void asyncClient(int port) throws Exception {
        out("server " + kind(port));
        try (AsynchronousSocketChannel c = AsynchronousSocketChannel.open()) {
            c.connect(addr(port)).get(10, TimeUnit.SECONDS);
            int total = (2 << 20) + 9;
            byte[] hdr = port == bport ? "ECHO\n".getBytes(StandardCharsets.US_ASCII) : new byte[0];
            ByteBuffer ob = ByteBuffer.allocate(hdr.length + total);
            ob.put(hdr).put(msg(total, 4)).flip();
            CompletableFuture<String> wdone = new CompletableFuture<>();
            c.write(ob, null, new CompletionHandler<Integer, Void>() {
                public void completed(Integer n, Void v) {
                    if (ob.hasRemaining()) {
                        c.write(ob, null, this);
                        return;
                    }
                    try {
                        c.shutdownOutput();
                        wdone.complete("written");
                    } catch (IOException e) {
                        wdone.complete(UsmcServer.exc(e));
                    }
                }
                public void failed(Throwable t, Void v) {
                    wdone.complete(UsmcServer.exc(t));
                }
            });
            ByteBuffer in = ByteBuffer.allocate(100000);
            long got = 0;
            boolean bad = false;
            for (;;) {
                in.clear();
                int r = c.read(in).get(10, TimeUnit.SECONDS);
                if (r < 0)
                    break;
                in.flip();
                while (in.hasRemaining())
                    if (in.get() != pat(got++, 4))
                        bad = true;
            }
            out("async " + wdone.get(10, TimeUnit.SECONDS) + " read " + got + (bad ? " MISMATCH" : " ok"));
            // A pending read, the channel closed: AsynchronousCloseException.
            Future<Integer> f = c.read(ByteBuffer.allocate(10));
            try {
                out("read after EOF " + f.get(10, TimeUnit.SECONDS));
            } catch (ExecutionException e) {
                out("read after EOF: " + UsmcServer.exc(e.getCause()));
            }
        }
        try (AsynchronousSocketChannel c = AsynchronousSocketChannel.open()) {
            c.connect(addr(bport)).get(10, TimeUnit.SECONDS);
            c.write(ByteBuffer.wrap("WAIT ac\n".getBytes(StandardCharsets.US_ASCII))).get();
            Future<Integer> f = c.read(ByteBuffer.allocate(10));
            Thread.sleep(300);
            c.close();
            try {
                out("pending read on close " + f.get(10, TimeUnit.SECONDS));
            } catch (ExecutionException e) {
                out("pending read on close: " + UsmcServer.exc(e.getCause()));
            }
            out("server saw " + result("ac"));
        }
    }

    // Reads racing a close from another thread while the server floods.
    static void closeRace(int iters) throws Exception {
        TreeMap<String, Integer> rd = new TreeMap<>(), srv = new TreeMap<>();
        for (int i = 0; i < iters; i++) {
            boolean chan = i % 2 == 1;
            String tag = "fr" + i;
            AtomicReference<String> how = new AtomicReference<>("still running");
            Closeable cl;
            Thread t;
            if (!chan) {
                Socket s = sock("FLOOD " + tag);
                cl = s;
                InputStream in = s.getInputStream();
                t = new Thread(() -> {
                    byte[] b = new byte[1 + 8191 * (tag.length() % 3)];
                    try {
                        while (in.read(b) >= 0)
                            ;
                        how.set("EOF");
                    } catch (IOException e) {
                        how.set(UsmcServer.exc(e));
                    }
                });
            } else {
                SocketChannel c = SocketChannel.open(addr(bport));
                c.write(ByteBuffer.wrap(("FLOOD " + tag + "\n").getBytes(StandardCharsets.US_ASCII)));
                cl = c;
                t = new Thread(() -> {
                    ByteBuffer b = ByteBuffer.allocateDirect(65536);
                    try {
                        for (;;) {
                            b.clear();
                            if (c.read(b) < 0)
                                break;
                        }
                        how.set("EOF");
                    } catch (AsynchronousCloseException e) {
                        how.set("channel closed (AsynchronousClose or ClosedChannel)");
                    } catch (ClosedChannelException e) {
                        how.set("channel closed (AsynchronousClose or ClosedChannel)");
                    } catch (IOException e) {
                        how.set(UsmcServer.exc(e));
                    }
                });
            }
            t.start();
            Thread.sleep(i % 7);
            cl.close();
            t.join(10000);
            rd.merge(t.isAlive() ? "STILL BLOCKED" : how.get(), 1, Integer::sum);
            srv.merge(result(tag), 1, Integer::sum);
        }
        out("readers " + rd);
        out("server " + srv);
    }

    // The server half-closes first; we read EOF, then still write.
    static void serverHalfClose() throws Exception {
        try (Socket s = sock("HALF h1")) {
            out("read " + s.getInputStream().read());
            s.getOutputStream().write(msg((1 << 20) + 1, 1));
            s.shutdownOutput();
            out("server saw " + result("h1"));
        }
        try (Selector sel = Selector.open(); SocketChannel c = SocketChannel.open(addr(bport))) {
            c.write(ByteBuffer.wrap("HALF h2\n".getBytes(StandardCharsets.US_ASCII)));
            c.configureBlocking(false);
            SelectionKey k = c.register(sel, SelectionKey.OP_READ);
            int n = sel.select(10000);
            out("selected " + n + " read " + c.read(ByteBuffer.allocate(10)));
            sel.selectedKeys().clear();
            k.interestOps(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
            n = sel.selectNow();
            out("again selected " + n + " readable " + k.isReadable() + " writable " + k.isWritable());
            ByteBuffer b = ByteBuffer.wrap(msg(300000, 2));
            while (b.hasRemaining()) {
                sel.select(10000);
                sel.selectedKeys().clear();
                c.write(b);
            }
            c.shutdownOutput();
            out("server saw " + result("h2"));
        }
    }

    // Tiny socket buffers set before connect.
    static void smallBuffers() throws Exception {
        for (int port : new int[] { bport, nport }) {
            try (Socket s = new Socket()) {
                s.setReceiveBufferSize(4096);
                s.setSendBufferSize(4096);
                s.connect(addr(port));
                OutputStream os = s.getOutputStream();
                if (port == bport)
                    os.write("ECHO\n".getBytes(StandardCharsets.US_ASCII));
                byte[] data = msg((1 << 20) + 3, 6);
                Thread w = new Thread(() -> {
                    try {
                        for (int off = 0; off < data.length; off += 1000)
                            os.write(data, off, Math.min(1000, data.length - off));
                        s.shutdownOutput();
                    } catch (IOException e) {
                        System.err.println("small buffers writer: " + UsmcServer.exc(e));
                    }
                });
                w.start();
                byte[] got = new byte[data.length];
                int n = readFully(s.getInputStream(), got, 0, got.length);
                w.join();
                out(kind(port) + " rcvbuf " + s.getReceiveBufferSize() + " sndbuf "
                    + s.getSendBufferSize() + " echo " + n + " equal " + Arrays.equals(got, data)
                    + " then " + s.getInputStream().read());
            }
        }
    }

    // A thread blocked in a channel write, interrupted.
    static void interruptWrite() throws Exception {
        SocketChannel c = SocketChannel.open(addr(bport));
        c.write(ByteBuffer.wrap("SLOWREAD iw\n".getBytes(StandardCharsets.US_ASCII)));
        ByteBuffer b = ByteBuffer.allocateDirect(300007);
        AtomicLong wrote = new AtomicLong();
        AtomicReference<String> how = new AtomicReference<>("still running");
        Thread t = new Thread(() -> {
            try {
                for (int i = 0; i < 1000; i++) {
                    b.clear();
                    while (b.hasRemaining())
                        wrote.addAndGet(c.write(b));
                }
                how.set("returned normally");
            } catch (IOException e) {
                how.set(e.getClass().getName());
            }
        });
        t.start();
        Thread.sleep(400);
        t.interrupt();
        t.join(10000);
        out("interrupted write: " + (t.isAlive() ? "STILL BLOCKED" : how.get()) + " open " + c.isOpen());
        String r = result("iw");
        out("server bytes == client's write total: " + r.startsWith("bytes=" + wrote.get() + " ")
            + " " + r.replaceAll("bytes=\\d+", "bytes>0"));
    }

    // This JVM exits with: bytes the server has not read yet (all must
    // arrive, then EOF), a thread blocked in a read (the server sees EOF)
    // and a connection with bytes we never read (the server sees a reset).
    static void exitWrite() throws Exception {
        Socket x = sock("WAIT ex2");
        Thread t = new Thread(() -> {
            try {
                x.getInputStream().read();
            } catch (IOException e) {
            }
        });
        t.setDaemon(true);
        t.start();
        Socket y = sock("FLOOD ex3");
        byte[] ten = new byte[10];
        out("flood read " + readFully(y.getInputStream(), ten, 0, 10));
        SocketChannel c = SocketChannel.open(addr(bport));
        c.write(ByteBuffer.wrap("SLOWREAD ex\n".getBytes(StandardCharsets.US_ASCII)));
        ByteBuffer b = ByteBuffer.wrap(msg((2 << 20) + 5, 8));
        while (b.hasRemaining())
            c.write(b);
        Thread.sleep(200);
        out("wrote " + b.position() + ", exiting");
        System.out.flush();
        System.exit(0);
    }

    static void exitResult() throws Exception {
        out("server saw " + result("ex"));
        out("server saw (blocked reader) " + result("ex2"));
        out("server saw (unread bytes) " + result("ex3"));
    }

    // Child processes (ProcessBuilder: jspawnhelper, vfork or fork, per
    // -Djdk.lang.Process.launchMechanism) started here and in the server
    // while connections are open; those go on afterwards.
    static String spawnHere() throws Exception {
        Process pr = new ProcessBuilder("/bin/sh", "-c", "echo child; exit 3")
            .redirectErrorStream(true).start();
        String o = new String(pr.getInputStream().readAllBytes(), StandardCharsets.US_ASCII).trim();
        return "rc=" + pr.waitFor() + " out=" + o;
    }

    static void spawn() throws Exception {
        Socket a = sock("ECHO");
        SocketChannel b = SocketChannel.open(addr(nport));
        InputStream ain = a.getInputStream();
        byte[] m1 = msg(100000, 1), got = new byte[100000];
        a.getOutputStream().write(m1);
        out("a before " + Arrays.equals(m1, Arrays.copyOf(got, readFully(ain, got, 0, got.length))));
        b.write(ByteBuffer.wrap(m1));
        ByteBuffer bb = ByteBuffer.allocate(100000);
        while (bb.hasRemaining() && b.read(bb) > 0)
            ;
        out("b before " + Arrays.equals(m1, bb.array()));
        for (int i = 0; i < 3; i++)
            out("spawned here " + spawnHere());
        try (Socket s = sock("SPAWN")) {
            out("spawned in the server " + UsmcServer.readLine(s.getInputStream()));
        }
        // Both connections still work, both ways, and end cleanly.
        byte[] m2 = msg(1 << 20, 2);
        Thread w = new Thread(() -> {
            try {
                a.getOutputStream().write(m2);
                a.shutdownOutput();
                ByteBuffer x = ByteBuffer.wrap(m2);
                while (x.hasRemaining())
                    b.write(x);
                b.shutdownOutput();
            } catch (IOException e) {
                System.err.println("spawn writer: " + UsmcServer.exc(e));
            }
        });
        w.start();
        byte[] g2 = new byte[1 << 20];
        int n = readFully(ain, g2, 0, g2.length);
        out("a after " + n + " " + Arrays.equals(m2, g2) + " then " + ain.read());
        ByteBuffer b2 = ByteBuffer.allocate(1 << 20);
        while (b2.hasRemaining() && b.read(b2) > 0)
            ;
        out("b after " + b2.position() + " " + Arrays.equals(m2, b2.array()) + " then "
            + b.read(ByteBuffer.allocate(1)));
        w.join();
        a.close();
        b.close();
    }

    // java.net.http.HttpClient (its own selector thread) and
    // HttpURLConnection against com.sun.net.httpserver.
    static void http() throws Exception {
        java.net.http.HttpClient hc = java.net.http.HttpClient.newBuilder()
            .version(java.net.http.HttpClient.Version.HTTP_1_1).build();
        String base = "http://" + (host instanceof Inet6Address ? "[" + host.getHostAddress() + "]"
                                   : host.getHostAddress()) + ":" + hport;
        int good = 0, n = 30;
        for (int i = 0; i < n; i++) {
            byte[] body = msg(i * 4099 % 200000, i);
            java.net.http.HttpResponse<String> r = hc.send(
                java.net.http.HttpRequest.newBuilder(URI.create(base + "/p" + i))
                    .POST(java.net.http.HttpRequest.BodyPublishers.ofByteArray(body)).build(),
                java.net.http.HttpResponse.BodyHandlers.ofString());
            if (r.statusCode() == 200 && r.body().equals("/p" + i + " " + body.length + " "
                                                        + Long.toHexString(crc(body))))
                good++;
            else
                out("request " + i + ": " + r.statusCode() + " " + r.body());
        }
        out("HttpClient sequential POST ok " + good + "/" + n);
        List<CompletableFuture<Boolean>> fs = new ArrayList<>();
        for (int i = 0; i < 20; i++) {
            int size = 1000 + i * 150001;
            fs.add(hc.sendAsync(java.net.http.HttpRequest.newBuilder(URI.create(base + "/big?" + size)).build(),
                                java.net.http.HttpResponse.BodyHandlers.ofByteArray())
                   .thenApply(r -> r.statusCode() == 200 && Arrays.equals(r.body(), UsmcServer0.pat(size))));
        }
        good = 0;
        for (CompletableFuture<Boolean> f : fs)
            if (f.get(20, TimeUnit.SECONDS))
                good++;
        out("HttpClient parallel GET ok " + good + "/20");
        good = 0;
        for (int i = 0; i < 10; i++) {
            HttpURLConnection c = (HttpURLConnection) new URL(base + "/u" + i).openConnection();
            c.setDoOutput(true);
            byte[] body = msg(i * 10007, i);
            try (OutputStream o = c.getOutputStream()) {
                o.write(body);
            }
            String r = new String(c.getInputStream().readAllBytes(), StandardCharsets.US_ASCII);
            if (c.getResponseCode() == 200 && r.equals("/u" + i + " " + body.length + " "
                                                       + Long.toHexString(crc(body))))
                good++;
            else
                out("HttpURLConnection " + i + ": " + r);
        }
        out("HttpURLConnection ok " + good + "/10");
    }

    static class UsmcServer0 {
        static byte[] pat(int n) {
            byte[] b = new byte[n];
            for (int i = 0; i < n; i++)
                b[i] = (byte) (i % 251);
            return b;
        }
    }

    // One channel registered with two selectors at once.
    static void twoSelectors() throws Exception {
        try (Selector s1 = Selector.open(); Selector s2 = Selector.open();
             SocketChannel c = SocketChannel.open(addr(bport))) {
            c.write(ByteBuffer.wrap("SEND 777\n".getBytes(StandardCharsets.US_ASCII)));
            c.configureBlocking(false);
            SelectionKey k1 = c.register(s1, SelectionKey.OP_READ);
            SelectionKey k2 = c.register(s2, SelectionKey.OP_READ | SelectionKey.OP_WRITE);
            int n1 = s1.select(10000), n2 = s2.select(10000);
            out("selectors " + n1 + " " + n2 + " readable " + k1.isReadable() + " " + k2.isReadable()
                + " writable " + k2.isWritable());
            ByteBuffer b = ByteBuffer.allocate(2000);
            long t0 = System.nanoTime();
            while (b.position() < 777 && System.nanoTime() - t0 < 5_000_000_000L)
                c.read(b);
            s1.selectedKeys().clear();
            s2.selectedKeys().clear();
            out("read " + b.position() + " then selectNow " + s1.selectNow() + " "
                + s2.selectNow() + " (s2 writable " + k2.isWritable() + ")");
        }
        out("server saw " + result("send"));
    }

    // OP_WRITE readiness: fill the buffers, the peer starts reading 1.5 s
    // later, the selector must report the channel writable again.
    static void writeReady() throws Exception {
        try (Selector sel = Selector.open(); SocketChannel c = SocketChannel.open(addr(bport))) {
            c.write(ByteBuffer.wrap("SLOWREAD wr\n".getBytes(StandardCharsets.US_ASCII)));
            c.configureBlocking(false);
            SelectionKey k = c.register(sel, SelectionKey.OP_WRITE);
            ByteBuffer b = ByteBuffer.allocateDirect(100003);
            long total = 0;
            int waits = 0, full = 0;
            while (total < (24 << 20)) {
                b.clear();
                int n = c.write(b);
                total += n;
                if (n == 0) {
                    full++;
                    if (sel.select(10000) == 0) {
                        out("NOT WRITABLE within 10 s after " + total);
                        break;
                    }
                    sel.selectedKeys().clear();
                    waits++;
                }
            }
            System.err.println("write_ready: " + total + " bytes, " + full + " full, " + waits + " waits");
            out("wrote >= 24 MiB " + (total >= (24 << 20)) + " waited " + (waits > 0) + " writable " + k.isWritable());
            c.shutdownOutput();
            out("server saw " + result("wr").replaceAll("bytes=" + total + " ", "bytes=ALL "));
        }
    }

    // Many connections open at once from one selector.
    static void holdMany(int conns) throws Exception {
        List<SocketChannel> all = new ArrayList<>();
        try (Selector sel = Selector.open()) {
            for (int i = 0; i < conns; i++) {
                SocketChannel c = SocketChannel.open();
                c.configureBlocking(false);
                c.connect(addr(i % 2 == 0 ? nport : aport));
                c.register(sel, SelectionKey.OP_CONNECT, new int[] { i, 0 });
                all.add(c);
            }
            int connected = 0, echoed = 0, bad = 0;
            long t0 = System.nanoTime();
            while (echoed < conns && System.nanoTime() - t0 < 25_000_000_000L) {
                if (sel.select(5000) == 0)
                    break;
                Iterator<SelectionKey> it = sel.selectedKeys().iterator();
                while (it.hasNext()) {
                    SelectionKey k = it.next();
                    it.remove();
                    SocketChannel c = (SocketChannel) k.channel();
                    int[] st = (int[]) k.attachment();
                    if (k.isConnectable()) {
                        c.finishConnect();
                        connected++;
                        c.write(ByteBuffer.wrap(msg(100, st[0])));
                        k.interestOps(SelectionKey.OP_READ);
                    } else if (k.isReadable()) {
                        ByteBuffer b = ByteBuffer.allocate(200);
                        int r = c.read(b);
                        if (r > 0) {
                            for (int j = 0; j < r; j++)
                                if (b.get(j) != pat(st[1] + j, st[0]))
                                    bad++;
                            st[1] += r;
                            if (st[1] == 100) {
                                echoed++;
                                k.interestOps(0);
                            }
                        } else if (r < 0) {
                            bad++;
                            k.cancel();
                        }
                    }
                }
            }
            out("open at once " + conns + ": connected " + connected + " echoed " + echoed + " bad " + bad);
            int eof = 0;
            for (SocketChannel c : all) {
                c.keyFor(sel).cancel();
            }
            sel.selectNow();
            for (SocketChannel c : all) {
                c.configureBlocking(true);
                c.shutdownOutput();
                if (c.read(ByteBuffer.allocate(10)) < 0)
                    eof++;
                c.close();
            }
            out("EOF after shutdownOutput " + eof + "/" + conns);
        }
    }

    // A listener of our own that accepts late: the client blocks in read
    // (or writes) before the server end exists, and closes first.
    static void lateAccept() throws Exception {
        try (ServerSocket ss = new ServerSocket(0, 5, host)) {
            Socket c = new Socket(host, ss.getLocalPort());
            out("read before accept: " + inThread(() -> c.getInputStream().read(), c::close));
            try (Socket a = ss.accept()) {
                out("accepted after the client closed, read " + a.getInputStream().read());
            }
            Socket c2 = new Socket(host, ss.getLocalPort());
            c2.getOutputStream().write(msg(300000, 4));
            Thread w = new Thread(() -> {
                try {
                    c2.getOutputStream().write(msg(300000, 5));
                    c2.shutdownOutput();
                } catch (IOException e) {
                    System.err.println("late accept writer: " + UsmcServer.exc(e));
                }
            });
            w.start();
            Thread.sleep(300);
            try (Socket a = ss.accept()) {
                byte[] b = new byte[600001];
                int n = readFully(a.getInputStream(), b, 0, b.length);
                byte[] want = new byte[600000];
                System.arraycopy(msg(300000, 4), 0, want, 0, 300000);
                System.arraycopy(msg(300000, 5), 0, want, 300000, 300000);
                out("accepted late, read " + n + " equal " + Arrays.equals(Arrays.copyOf(b, n), want));
                a.getOutputStream().write(msg(1000, 1));
            }
            w.join();
            byte[] b = new byte[1001];
            out("client read the answer " + readFully(c2.getInputStream(), b, 0, b.length));
            c2.close();
        }
    }

    // The JVM's own SIGBUS (a MappedByteBuffer over a truncated file) while
    // usmc's guard handler is installed: still InternalError, no crash.
    static void sigbus() throws Exception {
        try (Socket s = sock("ECHO")) {
            s.getOutputStream().write(msg(1000, 1));
            byte[] b = new byte[1000];
            out("connection first, read " + readFully(s.getInputStream(), b, 0, 1000));
            Path f = Files.createTempFile("usmc-java", ".map");
            try (FileChannel ch = FileChannel.open(f, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
                ch.write(ByteBuffer.wrap(new byte[65536]));
                java.nio.MappedByteBuffer m = ch.map(FileChannel.MapMode.READ_WRITE, 0, 65536);
                m.put(100, (byte) 7);
                ch.truncate(0);
                for (int i = 0; i < 3; i++) {
                    try {
                        out("mapped read after truncate " + m.get(8192 + i * 4096));
                    } catch (Throwable e) {
                        out("mapped read after truncate: " + UsmcServer.exc(e));
                    }
                }
            } finally {
                Files.deleteIfExists(f);
            }
            s.getOutputStream().write(msg(1000, 2));
            s.shutdownOutput();
            out("connection after, read " + readFully(s.getInputStream(), b, 0, 1000) + " "
                + Arrays.equals(b, msg(1000, 2)) + " then " + s.getInputStream().read());
        }
    }

    // Two listeners on one port with SO_REUSEPORT, in this JVM.
    static void reusePort() throws Exception {
        ServerSocketChannel l1 = ServerSocketChannel.open(), l2 = ServerSocketChannel.open();
        l1.setOption(StandardSocketOptions.SO_REUSEPORT, true);
        l2.setOption(StandardSocketOptions.SO_REUSEPORT, true);
        l1.bind(new InetSocketAddress(host, 0));
        l2.bind(new InetSocketAddress(host, ((InetSocketAddress) l1.getLocalAddress()).getPort()));
        int port = ((InetSocketAddress) l1.getLocalAddress()).getPort();
        AtomicInteger served = new AtomicInteger();
        for (ServerSocketChannel l : new ServerSocketChannel[] { l1, l2 }) {
            Thread t = new Thread(() -> {
                try {
                    for (;;) {
                        try (SocketChannel c = l.accept()) {
                            ByteBuffer b = ByteBuffer.allocate(4096);
                            while (c.read(b) > 0 || b.position() < 1000) {
                                if (b.position() >= 1000)
                                    break;
                            }
                            b.flip();
                            while (b.hasRemaining())
                                c.write(b);
                            served.incrementAndGet();
                        }
                    }
                } catch (IOException e) {
                }
            });
            t.setDaemon(true);
            t.start();
        }
        int ok = 0;
        for (int i = 0; i < 40; i++) {
            try (Socket s = new Socket(host, port)) {
                s.getOutputStream().write(msg(1000, i));
                byte[] b = new byte[1000];
                if (readFully(s.getInputStream(), b, 0, 1000) == 1000 && Arrays.equals(b, msg(1000, i)))
                    ok++;
            }
        }
        l1.close();
        l2.close();
        out("reuseport echo ok " + ok + "/40");
    }

    static void run(String name) throws Exception {
        switch (name) {
        case "nio_echo":
            nioEcho(bport);
            nioEcho(nport);
            nioEcho(aport);
            break;
        case "block_echo":
            blockEcho(bport);
            blockEcho(nport);
            blockEcho(aport);
            break;
        case "gather": gather(); break;
        case "sink": sink(); break;
        case "input": inputSide(); break;
        case "close_read": closeRead(); break;
        case "close_write": closeWrite(); break;
        case "close_accept": closeAccept(); break;
        case "close_select":
            closeSelect(false);
            closeSelect(true);
            break;
        case "resets": resets(); break;
        case "options": options(); break;
        case "refused": refused(); break;
        case "oob": oob(); break;
        case "many": many(150, 6, 25); break;
        case "nio_multi":
            nioMulti(nport, 32, 4, 20000);
            nioMulti(bport, 16, 3, 100000);
            break;
        case "transfer": transfer(); break;
        case "close_race": closeRace(24); break;
        case "close_race_long": closeRace(200); break;
        case "half_close": serverHalfClose(); break;
        case "small_buffers": smallBuffers(); break;
        case "interrupt_write": interruptWrite(); break;
        case "exit_write": exitWrite(); break;
        case "spawn": spawn(); break;
        case "reuseport": reusePort(); break;
        case "sigbus": sigbus(); break;
        case "two_selectors": twoSelectors(); break;
        case "write_ready": writeReady(); break;
        case "hold_many": holdMany(1000); break;
        case "late_accept": lateAccept(); break;
        case "http": http(); break;
        case "exit_result": exitResult(); break;
        case "async":
            asyncClient(aport);
            asyncClient(nport);
            break;
        default:
            throw new IllegalArgumentException("unknown scenario " + name);
        }
    }

    public static void main(String[] a) throws Exception {
        host = InetAddress.getByName(a[0]);
        bport = Integer.parseInt(a[1]);
        nport = Integer.parseInt(a[2]);
        aport = Integer.parseInt(a[3]);
        hport = Integer.parseInt(a[4]);
        for (int i = 5; i < a.length; i++) {
            cur = a[i];
            final String name = a[i];
            Thread t = new Thread(() -> {
                try {
                    run(name);
                } catch (Throwable e) {
                    out("FAILED " + UsmcServer.exc(e));
                    e.printStackTrace();
                }
            });
            t.setDaemon(true);
            t.start();
            t.join(30000);
            if (t.isAlive()) {
                out("TIMEOUT");
                for (Map.Entry<Thread, StackTraceElement[]> e : Thread.getAllStackTraces().entrySet()) {
                    System.err.println(e.getKey());
                    for (StackTraceElement s : e.getValue())
                        System.err.println("    at " + s);
                }
                System.out.flush();
                Runtime.getRuntime().halt(3);
            }
        }
        System.out.println("done");
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }
}
