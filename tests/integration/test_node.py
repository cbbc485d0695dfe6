"""node (libuv) programs under usmc, each run the same way over plain TCP.

libuv closes descriptors with syscall(SYS_close) instead of close(), which
usmc used to miss: the next socket given the same number was taken for
the old connection, and most of libuv's own connections stayed on TCP
(issue 14 item 10).  A node HTTP server and a node client that opens a new
connection per request (Connection: close, so numbers are reused all the
time), then requests over one keep-alive connection: every answer is
checked byte for byte (sha256 of each body), the outcome is the same plain
and under usmc, and under usmc every connection went through shared memory
(counters)."""
import shutil

import pytest

from . import helpers as h

NODE = shutil.which("node") or "/usr/bin/node"

SERVER_JS = r'''
const http = require('http');
const crypto = require('crypto');
const port = +process.argv[2];
http.createServer((req, res) => {
  const parts = [];
  req.on('data', (d) => parts.push(d));
  req.on('end', () => {
    const b = Buffer.concat(parts);
    const sum = crypto.createHash('sha256').update(b).digest('hex');
    res.end(req.url + ' ' + b.length + ' ' + sum + '\n');
  });
}).listen(port, '127.0.0.1', () => console.log('listening'));
'''

# CLIENT PORT N KEEPALIVE: N requests, each on a new connection, then N on
# one keep-alive connection; prints "OK <good>/<total>".
CLIENT_JS = r'''
const http = require('http');
const crypto = require('crypto');
const port = +process.argv[2], n = +process.argv[3];
const keep = new http.Agent({ keepAlive: true, maxSockets: 1 });
let good = 0, done = 0;
function body(i) {
  const b = Buffer.alloc(100 + i * 509);
  for (let k = 0; k < b.length; k++) b[k] = (i * 7 + k) % 251;
  return b;
}
function one(i, agent) {
  return new Promise((resolve) => {
    const b = body(i);
    const want = '/r' + i + ' ' + b.length + ' ' +
      crypto.createHash('sha256').update(b).digest('hex') + '\n';
    const req = http.request({ port, host: '127.0.0.1', method: 'POST', path: '/r' + i,
                               agent }, (res) => {
      let got = '';
      res.setEncoding('latin1');
      res.on('data', (d) => { got += d; });
      res.on('end', () => {
        if (res.statusCode === 200 && got === want) good++;
        else console.log('request ' + i + ': ' + res.statusCode + ' ' + JSON.stringify(got));
        done++;
        resolve();
      });
    });
    req.on('error', (e) => { console.log('request ' + i + ': ' + e); done++; resolve(); });
    req.end(b);
  });
}
(async () => {
  for (let i = 0; i < n; i++) await one(i, false);
  for (let i = 0; i < n; i++) await one(n + i, keep);
  keep.destroy();
  console.log('OK ' + good + '/' + done);
})();
'''


@pytest.mark.timeout(180, method="signal")
@pytest.mark.parametrize("usmc", [False, True], ids=["plain", "usmc"])
def test_node_http(rundir, procs, tmp_path, usmc):
    if not shutil.which(NODE):
        pytest.skip("node is not installed")
    n = 150
    (tmp_path / "server.js").write_text(SERVER_JS)
    (tmp_path / "client.js").write_text(CLIENT_JS)
    server, port = h.start_server(
        procs, "node-server", lambda p: [NODE, tmp_path / "server.js", p],
        rundir.env(debug=usmc), usmc=usmc)
    client = procs.start("node-client", [NODE, tmp_path / "client.js", port, n],
                         rundir.env(), usmc=usmc)
    assert client.wait(150) == 0, client.diag()
    diag = server.diag() + "\n" + client.diag()
    assert client.text().strip().splitlines()[-1] == "OK %d/%d" % (2 * n, 2 * n), diag
    if usmc:
        # n connections closed after one request each, one keep-alive one.
        st = rundir.settle(h.accel_pred(n + 1))
        h.assert_accelerated(st, clients=n + 1, diag=diag)
