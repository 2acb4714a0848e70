#!/usr/bin/env python3
"""A chat-completions client with the Python standard library only (the
gateway tests' second client, beside the official openai npm package).

    openai_stdlib_client.py BASE_URL MODEL CONTENT

urllib.request, one completion unstreamed: prints "reply: <text>" and
"cold: <X-Mesh-Cold-Start>"; then http.client, the same streamed
(Server-Sent Events over chunked): "piece: <text>" per event, "done" at
"data: [DONE]" (exit 0).  An HTTP error prints "error: <status> <body>",
a cut stream "error: cut" (exit 1).
"""
import http.client
import json
import sys
import urllib.error
import urllib.parse
import urllib.request


def main():
    base, model, content = sys.argv[1:4]
    body = {"model": model, "messages": [{"role": "user", "content": content}]}
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            reply = json.load(r)
            print("reply:", reply["choices"][0]["message"]["content"])
            print("cold:", r.headers.get("X-Mesh-Cold-Start", "0"))
    except urllib.error.HTTPError as e:
        print("error:", e.code, e.read().decode(errors="replace"))
        return 1
    u = urllib.parse.urlsplit(base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=20)
    body["stream"] = True
    c.request("POST", u.path + "/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        print("error:", r.status, r.read().decode(errors="replace"))
        return 1
    try:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                print("done")
                return 0
            delta = json.loads(line[6:])["choices"][0].get("delta", {})
            if delta.get("content"):
                print("piece:", delta["content"])
    except (http.client.IncompleteRead, ConnectionError):
        pass
    print("error: cut")
    return 1


if __name__ == "__main__":
    sys.exit(main())
