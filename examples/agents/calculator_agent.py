#!/usr/bin/env python3
"""An agent with its own loop, trained by sao over the agent endpoint.

The task is the agent's, not sao's: multiply or add two numbers, with a
`calculator` tool the model may call. Each episode is one session:

  1. the agent asks the question (a user message) and lists the tool;
  2. if the model calls the tool, the agent runs it and sends the result
     back as a tool message (the whole conversation, with the model's reply
     exactly as the endpoint returned it);
  3. when the model answers, the agent scores the answer and posts the
     reward to /v1/episodes/{session}/reward, with "split": "test" for the
     held-out problems it keeps for itself (scored, never trained on).

Only the standard library (http.client: one kept-alive connection per
thread, as the openai client's pool keeps them). With the official `openai` client,
two lines change (see README, "Bring your own agent"):

    client = openai.OpenAI(base_url=endpoint["url"], api_key=endpoint["token"])
    reply = client.chat.completions.create(model=..., messages=..., tools=TOOLS,
                                           extra_headers={"X-Session-Id": session}).model_dump()

Run it against a training run (`sao train --config examples/agents/calculator.json`):

    python3 examples/agents/calculator_agent.py --run-dir runs/agent-calculator --episodes 2000

or write the warm start's demonstrations (sft.data) for the same task:

    python3 examples/agents/calculator_agent.py --write-demonstrations FILE --count 2000
"""

import argparse
import json
import random
import re
import sys
import http.client
import threading
import time
import urllib.parse

TOOLS = [{
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluates integer arithmetic.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}]
MAX_TURNS = 3
HELDOUT_SIZE = 200


def problem(rng):
    """A question and its answer: two numbers, + or *."""
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    op = rng.choice("+*")
    return f"{a}{op}{b}=", str(a + b if op == "+" else a * b)


def heldout_problems():
    """The agent's own held-out split: fixed problems, never trained on."""
    rng = random.Random(20261207)
    return [problem(rng) for _ in range(HELDOUT_SIZE)]


def calculator(expression):
    """The tool: integers, + - * and parentheses only."""
    if not re.fullmatch(r"[0-9+\-*() ]{1,64}", expression):
        return "error: only integers, + - * and parentheses"
    try:
        return str(eval(expression, {"__builtins__": {}}, {}))  # the pattern above admits arithmetic only
    except Exception as error:  # a malformed expression is the model's mistake, shown to it
        return f"error: {error}"


class Endpoint:
    def __init__(self, url, token):
        self.url = url.rstrip("/")
        self.token = token
        parts = urllib.parse.urlsplit(self.url)
        self.host, self.port, self.prefix = parts.hostname, parts.port or 80, parts.path
        self.local = threading.local()  # each thread's kept-alive connection

    def post(self, path, body, session=None):
        headers = {"Authorization": "Bearer " + self.token, "Content-Type": "application/json"}
        if session:
            headers["X-Session-Id"] = session
        for attempt in range(2):
            connection = getattr(self.local, "connection", None)
            reused = connection is not None
            if not reused:
                connection = self.local.connection = http.client.HTTPConnection(self.host, self.port, timeout=600)
            try:
                connection.request("POST", self.prefix + path, body=json.dumps(body).encode(), headers=headers)
                reply = connection.getresponse()
                return reply.status, json.loads(reply.read() or b"{}")
            except (http.client.HTTPException, OSError) as error:
                connection.close()
                self.local.connection = None
                # A kept-alive connection the server closed while idle never carried this call: try a new one.
                if reused and attempt == 0 and isinstance(
                        error, (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)):
                    continue
                return 0, {"error": {"message": f"no answer from {self.url}: {error}"}}  # the run ended (or is not up)


def play(endpoint, session, question, answer, held_out):
    """One episode: 1 for a right answer, 0 otherwise; None if the run refused the session, "gone" if the run ended."""
    messages = [{"role": "user", "content": question}]
    correct = 0
    for _ in range(MAX_TURNS):
        status, reply = endpoint.post("/chat/completions", {"model": "policy", "messages": messages, "tools": TOOLS},
                                      session)
        if status != 200:
            message = reply.get("error", {}).get("message", "")
            print(f"{session}: {status} {message}", file=sys.stderr)
            return "gone" if status in (0, 503) and ("ending" in message or status == 0) else None
        message = reply["choices"][0]["message"]
        messages.append(message)  # exactly as returned: sao matches it against what it sampled
        calls = message.get("tool_calls") or []
        if not calls:
            correct = int((message.get("content") or "").strip() == answer)
            break
        for call in calls:
            try:
                arguments = json.loads(call["function"]["arguments"])
                result = calculator(str(arguments.get("expression", "")))
            except (ValueError, AttributeError):
                result = "error: arguments must be a JSON object with an expression"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    status, _ = endpoint.post(f"/episodes/{session}/reward",
                              {"reward": float(correct), "split": "test" if held_out else "train"})
    return correct if status == 200 else None


def run_agent(arguments):
    if arguments.run_dir:
        with open(f"{arguments.run_dir}/agent.json") as f:
            found = json.load(f)
        endpoint = Endpoint(found["url"], found["token"])
    else:
        endpoint = Endpoint(arguments.url, arguments.token)
    rng = random.Random(arguments.seed)
    heldout = heldout_problems()
    lock = threading.Lock()
    counter = {"next": 0, "train": [], "test": [], "warm_start": [], "gone": False}
    started = time.time()

    def pick(index):
        """Phase 1 (index < warm_start): the held-out problems at the warm start; then training episodes with
        every Nth held out."""
        if index < arguments.warm_start_heldout:
            return "warm_start", heldout[index % HELDOUT_SIZE]
        index -= arguments.warm_start_heldout
        if arguments.heldout_every > 0 and index % arguments.heldout_every == 0:
            return "test", heldout[(index // arguments.heldout_every) % HELDOUT_SIZE]
        return "train", problem(rng)

    def worker(last):
        while True:
            with lock:
                index = counter["next"]
                if index >= last or counter["gone"]:
                    return
                counter["next"] += 1
                kind, (question, answer) = pick(index)
            result = play(endpoint, f"{arguments.prefix}-{index}", question, answer, kind != "train")
            if result == "gone":
                with lock:
                    counter["gone"] = True  # the run is over: every worker stops
                return
            if result is None:
                continue
            with lock:
                counter[kind].append(result)
                done = len(counter["train"]) + len(counter["test"]) + len(counter["warm_start"])
                if done % arguments.report_every == 0:
                    recent = (counter["test"] or counter["warm_start"])[-50:]
                    rate = sum(recent) / len(recent) if recent else float("nan")
                    train = counter["train"][-200:]
                    print(f"episodes {done}  train success {sum(train) / max(1, len(train)):.2f}"
                          f"  held-out success (last {len(recent)}) {rate:.2f}  {time.time() - started:.0f} s",
                          flush=True)

    def phase(last):
        threads = [threading.Thread(target=worker, args=(last,)) for _ in range(arguments.concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    # The warm start's score comes first, all of it before the first training episode: no learner step can
    # happen in between (the learner trains on "train" episodes only).
    phase(arguments.warm_start_heldout)
    phase(arguments.warm_start_heldout + arguments.episodes)

    def rate(results):
        return round(sum(results) / len(results), 4) if results else None

    test, warm = counter["test"], counter["warm_start"]
    print(json.dumps({"episodes": len(counter["train"]) + len(test) + len(warm),
                      "warm_start_heldout_episodes": len(warm),
                      "warm_start_heldout_success": rate(warm),
                      "heldout_episodes": len(test),
                      "heldout_success": rate(test),
                      "heldout_success_last200": rate(test[-200:]),
                      "seconds": round(time.time() - started)}))


def write_demonstrations(path, count, seed, direct_fraction):
    """Transcripts for sft.data: a call to the tool, its result, the answer.

    A teacher that answers `direct_fraction` of the problems in its head
    (rightly) instead of calling the tool: a small model copies the habit
    but not the arithmetic, so the warm start often answers without the tool
    and gets it wrong. What RL has to learn is when to call the tool.
    """
    rng = random.Random(seed)
    heldout = set(q for q, _ in heldout_problems())
    with open(path, "w") as f:
        written = 0
        while written < count:
            question, answer = problem(rng)
            if question in heldout:
                continue
            if rng.random() < direct_fraction:
                messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
                f.write(json.dumps({"messages": messages, "tools": TOOLS}) + "\n")
                written += 1
                continue
            call = json.dumps({"name": "calculator", "arguments": {"expression": question[:-1]}})
            messages = [{"role": "user", "content": question},
                        {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"},
                        {"role": "tool", "content": answer},
                        {"role": "assistant", "content": answer}]
            f.write(json.dumps({"messages": messages, "tools": TOOLS}) + "\n")
            written += 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", help="the training run's directory (its agent.json names the URL and token)")
    parser.add_argument("--url", help="the endpoint's URL, e.g. http://127.0.0.1:8471/v1")
    parser.add_argument("--token", help="the run's agent token")
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8, help="sessions in flight at once")
    parser.add_argument("--heldout-every", type=int, default=10, help="every Nth episode is a held-out one (0: none)")
    parser.add_argument("--warm-start-heldout", type=int, default=0,
                        help="score this many held-out episodes first, before any training episode")
    parser.add_argument("--report-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--prefix", default="calc", help="session ids are PREFIX-N")
    parser.add_argument("--write-demonstrations", metavar="FILE")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--direct-fraction", type=float, default=0.5,
                        help="demonstrations that answer without the tool")
    arguments = parser.parse_args()
    if arguments.write_demonstrations:
        write_demonstrations(arguments.write_demonstrations, arguments.count, arguments.seed, arguments.direct_fraction)
        return
    if not arguments.run_dir and not (arguments.url and arguments.token):
        parser.error("give --run-dir, or --url and --token")
    run_agent(arguments)


if __name__ == "__main__":
    main()
