#!/usr/bin/env python3
"""An OpenAI-compatible test upstream (standard library only).

    openai_server.py --port P [--host 127.0.0.1] [--models a,b] [--start-delay S]
                     [--ready-delay S] [--token-delay S] [--tokens N]
                     [--pid-file F] [--ready-file F] [--hang-probe] [--exit-on-start N] [--cors] [--echo]

Routes (HTTP/1.1, keep-alive):
  GET  /v1/models            {"object":"list","data":[{"id":M,"object":"model",...}]} for the
                             --models list (empty string: none listed); 503 during --ready-delay;
                             never answered with --hang-probe
  POST /v1/chat/completions  the reply is the tokens "tok0 tok1 ..." (--tokens, default 5);
                             with "stream": true, Server-Sent Events (chunked), one token per
                             event, --token-delay seconds apart, then "data: [DONE]".
                             The last user message steers it: "crash" exits (status 3) after
                             two streamed tokens (or at once, unstreamed); "hang" never answers;
                             "slow:S" waits S seconds before answering; "status:N" answers N
                             with an OpenAI-shaped error JSON (an upstream's 503, 404, ...).
                             A header "X-Read-Delay: S" waits S seconds before reading the body.
  POST /v1/completions       the same, OpenAI's legacy shape
  GET  /health               "ok"
Every request is logged on stdout ("req METHOD PATH", a POST with " from CLIENT-PORT"); --start-delay sleeps before listening;
--exit-on-start N exits with N at once (a server that cannot start); --cors adds
"Access-Control-Allow-Origin: *" to every answer (as llama-server and vLLM do); --echo adds
to an unstreamed completion "received": the request body's bytes as they came (text) and
"received_length": its Content-Length (a body that is not JSON is a 400, as llama-server's).
"""
import argparse
import json
import os
import socketserver
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

ARGS = None
T0 = time.monotonic()


class Server(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        pass

    def send_response(self, code, message=None):
        super().send_response(code, message)
        if ARGS.cors:
            self.send_header("Access-Control-Allow-Origin", "*")

    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self):
        print("req GET", self.path, flush=True)
        if self.path == "/health":
            body = b"ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path == "/v1/models":
            if ARGS.hang_probe:
                time.sleep(3600)
            if time.monotonic() - T0 < ARGS.start_delay + ARGS.ready_delay:
                return self.send_json(503, {"error": {"message": "loading", "type": "unavailable"}})
            models = [m for m in ARGS.models.split(",") if m]
            return self.send_json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "mesh-tests"} for m in models]})
        self.send_json(404, {"error": {"message": "no route " + self.path, "type": "invalid_request_error"}})

    def do_POST(self):
        print("req POST", self.path, "from", self.client_address[1], flush=True)
        n = int(self.headers.get("Content-Length") or 0)
        time.sleep(float(self.headers.get("X-Read-Delay") or 0))  # a server slow to take the body
        raw = self.rfile.read(n)
        try:
            req = json.loads(raw or b"{}")
        except ValueError:
            return self.send_json(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            return self.send_json(404, {"error": {"message": "no route " + self.path, "type": "invalid_request_error"}})
        chat = self.path == "/v1/chat/completions"
        if chat:
            msgs = req.get("messages") or [{}]
            said = str(msgs[-1].get("content", ""))
        else:
            said = str(req.get("prompt", ""))
        model = req.get("model", "")
        if "hang" in said:
            time.sleep(3600)
        if said.startswith("slow:"):
            time.sleep(float(said[5:]))
        if said.startswith("status:"):
            return self.send_json(int(said[7:]), {"error": {"message": "asked for " + said[7:], "type": "server_error"}})
        toks = ["tok%d" % i for i in range(ARGS.tokens)]
        cid, created = "cmpl-%d" % os.getpid(), int(time.time())
        if not req.get("stream"):
            if "crash" in said:
                os._exit(3)
            text = " ".join(toks)
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                      if chat else {"index": 0, "text": text, "finish_reason": "stop"})
            out = {
                "id": cid, "object": "chat.completion" if chat else "text_completion", "created": created,
                "model": model, "choices": [choice],
                "usage": {"prompt_tokens": 1, "completion_tokens": len(toks), "total_tokens": 1 + len(toks)}}
            if ARGS.echo:
                out["received"], out["received_length"] = raw.decode("utf-8"), n
            return self.send_json(200, out)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i, t in enumerate(toks):
            if i and ARGS.token_delay:
                time.sleep(ARGS.token_delay)
            if "crash" in said and i == 2:
                os._exit(3)
            piece = (t if i == 0 else " " + t)
            choice = ({"index": 0, "delta": {"content": piece}, "finish_reason": None}
                      if chat else {"index": 0, "text": piece, "finish_reason": None})
            ev = {"id": cid, "object": "chat.completion.chunk" if chat else "text_completion",
                  "created": created, "model": model, "choices": [choice]}
            self.chunk(b"data: " + json.dumps(ev).encode() + b"\n\n")
        last = ({"index": 0, "delta": {}, "finish_reason": "stop"} if chat
                else {"index": 0, "text": "", "finish_reason": "stop"})
        self.chunk(b"data: " + json.dumps({"id": cid, "object": "chat.completion.chunk" if chat else "text_completion",
                                           "created": created, "model": model, "choices": [last]}).encode() + b"\n\n")
        self.chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--models", default="test-model")
    p.add_argument("--start-delay", type=float, default=0)
    p.add_argument("--ready-delay", type=float, default=0)
    p.add_argument("--token-delay", type=float, default=0)
    p.add_argument("--tokens", type=int, default=5)
    p.add_argument("--pid-file")
    p.add_argument("--ready-file")
    p.add_argument("--hang-probe", action="store_true")
    p.add_argument("--exit-on-start", type=int)
    p.add_argument("--cors", action="store_true")
    p.add_argument("--echo", action="store_true")
    ARGS = p.parse_args()
    if ARGS.pid_file:
        with open(ARGS.pid_file, "w") as f:
            f.write("%d\n" % os.getpid())
    print("openai_server: starting", flush=True)
    if ARGS.exit_on_start is not None:
        print("openai_server: cannot start (asked to)", flush=True)
        sys.exit(ARGS.exit_on_start)
    time.sleep(ARGS.start_delay)
    srv = Server((ARGS.host, ARGS.port), Handler)
    if ARGS.ready_file:
        with open(ARGS.ready_file, "w") as f:
            f.write("ready\n")
    print("openai_server: listening on %s:%d" % (ARGS.host, ARGS.port), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
