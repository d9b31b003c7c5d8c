"""Many concurrent ``openai.AsyncOpenAI`` clients against a gateway, counting each client's refusals.

Used by the tests, and runnable by hand to measure a server (the figures of issue 11's note)::

    .venv/bin/python -m tests.gateway.sdk_load http://127.0.0.1:8000 --clients 200 --max-tokens 64
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SDKLoadResult:
    """ok: clients whose completion succeeded (within the SDK's retries); refusals: 429/503 answers
    each client received, in client order; retry_after_ms: every ``retry-after-ms`` value seen;
    seconds: wall time of the whole run."""

    clients: int
    ok: int
    refusals: list[int]
    retry_after_ms: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def refused_at_least(self, n: int) -> int:
        return sum(1 for r in self.refusals if r >= n)

    def summary(self) -> str:
        return (f"{self.ok}/{self.clients} succeeded, {self.refused_at_least(3)} clients refused >= 3 times, "
                f"{sum(self.refusals)} refusals in all, {self.seconds:.1f} s")


async def run_sdk_clients(base_url: str, clients: int = 200, max_tokens: int = 64, max_retries: int = 8,
                          timeout_s: float = 180.0) -> SDKLoadResult:
    """Start ``clients`` concurrent completions (one ``AsyncOpenAI`` client each, ``max_retries``
    as given, so each honours Retry-After on its own) and count what every client saw."""
    import httpx2
    import openai

    refusals = [0] * clients
    retry_after: list[int] = []

    def hook_for(index: int) -> Any:
        async def on_response(response: Any) -> None:
            if response.status_code in (429, 503):
                refusals[index] += 1
                value = response.headers.get("retry-after-ms")
                if value is not None:
                    retry_after.append(int(value))
        return on_response

    async def one(index: int) -> bool:
        http = httpx2.AsyncClient(event_hooks={"response": [hook_for(index)]}, timeout=timeout_s)
        client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=max_retries,
                                    http_client=http)
        try:
            await client.completions.create(model="sim", prompt=f"client {index}", max_tokens=max_tokens)
            return True
        except openai.APIError:
            return False
        finally:
            await client.close()
            await http.aclose()

    started = time.monotonic()
    results = await asyncio.gather(*(one(i) for i in range(clients)))
    return SDKLoadResult(clients, sum(results), refusals, retry_after, time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-retries", type=int, default=8)
    args = parser.parse_args()
    result = asyncio.run(run_sdk_clients(args.url, args.clients, args.max_tokens, args.max_retries))
    print(result.summary())


if __name__ == "__main__":
    main()
