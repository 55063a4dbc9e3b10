#!/usr/bin/env python3
# The origin against two abuses from an outside attack run, with figures to
# compare builds: 48 anonymous connections that each send a head promising
# 1 MiB and 1 MiB - 1 of body (the RSS they make the origin hold), and 20
# bodies trickled at 1 byte/s with a valid shop token (when they are cut).
# Usage: python3 bench/origin-abuse.py path/to/flashgate-origin  (about 45 s)
import asyncio, os, secrets, subprocess, sys, tempfile, time, socket

BIN = sys.argv[1]
def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

shop = secrets.token_hex(32)
env = dict(os.environ, FORWARD_KEYS=f"f1:{secrets.token_hex(32)}", ORIGIN_READ_TOKENS=f"r1:{secrets.token_hex(32)}",
           ORIGIN_SHOP_TOKENS=f"s1:{shop}", BUYER_TOKEN_KEYS=f"b1:{secrets.token_hex(32)}", RUST_LOG="warn")
env.pop("DATABASE_URL", None)
port = free_port()
data = tempfile.mkdtemp()
proc = subprocess.Popen([BIN, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data], env=env,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

async def wait_up():
    for _ in range(200):
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"); await w.drain()
            if b"200" in await asyncio.wait_for(r.read(100), 2): w.close(); return
        except Exception: pass
        await asyncio.sleep(0.1)
    raise SystemExit("origin did not start")

async def anon(n, body_len):
    # A head promising 1 MiB without a token, then a body one byte short.
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"POST /v1/buyer-tokens HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {1024*1024}\r\n\r\n".encode())
    chunk = b" " * 65536
    sent = 0
    try:
        while sent < body_len:
            k = min(len(chunk), body_len - sent)
            w.write(chunk[:k]); await w.drain(); sent += k
    except Exception:
        pass
    return r, w, sent

async def trickle(i):
    body = b'{"buyer_id":"alice"}'
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"POST /v1/buyer-tokens HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nauthorization: Bearer {shop}\r\ncontent-length: 1000\r\n\r\n".encode())
    await w.drain()
    t0 = time.monotonic()
    async def send():
        try:
            for _ in range(1000):
                w.write(b" "); await w.drain(); await asyncio.sleep(1)
        except Exception: pass
    task = asyncio.create_task(send())
    try:
        head = await asyncio.wait_for(r.read(200), 60)
    except Exception:
        head = b"(none)"
    task.cancel()
    return time.monotonic() - t0, head.split(b"\r\n")[0].decode(errors="replace")

async def main():
    await wait_up()
    base = rss_mib(proc.pid)
    conns = await asyncio.gather(*[anon(i, 1024*1024 - 1) for i in range(48)])
    await asyncio.sleep(1.0)
    held = rss_mib(proc.pid)
    sent = sum(c[2] for c in conns) / (1024*1024)
    for r, w, _ in conns: w.close()
    print(f"48 anonymous 1 MiB-1 bodies: RSS {base:.1f} MiB idle -> {held:.1f} MiB while held ({sent:.1f} MiB of body accepted by the socket)")
    results = await asyncio.gather(*[trickle(i) for i in range(20)])
    times = sorted(t for t, _ in results)
    print(f"20 bodies at 1 byte/s with a shop token: cut after {times[0]:.1f}..{times[-1]:.1f} s; answers {sorted(set(h for _, h in results))}")

try:
    asyncio.run(main())
finally:
    proc.terminate(); proc.wait()
