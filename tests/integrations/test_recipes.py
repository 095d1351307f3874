"""The framework recipes of docs/adapters.md, run as printed and exercised.

Each ```python block whose first line is ``# recipe: <name>`` is executed in
a fresh namespace; the resulting app is then hit through its framework's
test client (Flask, Starlette, FastAPI) or werkzeug's WSGI client (Django,
whose own test client would bypass WSGI middleware).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from werkzeug.test import Client

with warnings.catch_warnings():
    # Starlette >= 1.x nudges towards httpx2; the client works the same here.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

DOC = Path(__file__).resolve().parents[2] / "docs" / "adapters.md"
BODY_429 = b'{"status":429,"code":"rate_limited","message":"too many requests"}'


def recipes():
    blocks = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), re.S | re.M)
    found = {}
    for block in blocks:
        first = block.splitlines()[0]
        if first.startswith("# recipe: "):
            found[first[len("# recipe: ") :].strip()] = block
    return found


def run_recipe(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": f"recipe_{name}"}
    exec(compile(recipes()[name], f"{DOC}:{name}", "exec"), namespace)
    return namespace


def test_every_framework_has_a_recipe():
    assert set(recipes()) == {"flask", "django", "starlette", "fastapi"}


def test_flask(tmp_path, monkeypatch):
    ns = run_recipe("flask", tmp_path, monkeypatch)
    client = ns["app"].test_client()
    for _ in range(3):
        health = client.get("/health")
        assert health.status_code == 200
        assert "X-RateLimit-Limit" not in health.headers
    responses = [client.get("/") for _ in range(11)]
    assert [r.status_code for r in responses] == [200] * 10 + [429]
    assert responses[0].get_json() == {"hello": "world"}
    assert responses[0].headers["X-RateLimit-Limit"] == "10"
    assert responses[9].headers["X-RateLimit-Remaining"] == "0"
    assert responses[10].data == BODY_429
    assert responses[10].headers["Retry-After"] == "6"


def test_django(tmp_path, monkeypatch):
    ns = run_recipe("django", tmp_path, monkeypatch)
    client = Client(ns["application"])
    responses = [client.get("/", environ_base={"REMOTE_ADDR": "198.51.100.7"}) for _ in range(11)]
    assert [r.status_code for r in responses] == [200] * 10 + [429]
    assert responses[0].get_data() == b'{"hello": "world"}'
    assert responses[0].headers["X-RateLimit-Remaining"] == "9"
    assert responses[10].get_data() == BODY_429
    # Another client has its own bucket; a trusted proxy's header names the client.
    other = client.get("/", environ_base={"REMOTE_ADDR": "198.51.100.8"})
    assert other.status_code == 200
    proxied = client.get(
        "/",
        environ_base={"REMOTE_ADDR": "10.1.2.3"},
        headers={"X-Forwarded-For": "198.51.100.7"},
    )
    assert proxied.status_code == 429
    # A Forwarded header added by the client does not move it to another
    # bucket (nor onto the proxy's): the recipe pins X-Forwarded-For.
    spoofed = client.get(
        "/",
        environ_base={"REMOTE_ADDR": "10.1.2.3"},
        headers={"X-Forwarded-For": "198.51.100.7", "Forwarded": "for=192.0.2.99"},
    )
    assert spoofed.status_code == 429
    assert spoofed.get_data() == BODY_429
    assert ns["limiter"].peek("ip:10.1.2.3").remaining == 10


def test_starlette(tmp_path, monkeypatch):
    ns = run_recipe("starlette", tmp_path, monkeypatch)
    with TestClient(ns["app"]) as client:
        responses = [client.get("/") for _ in range(11)]
    assert [r.status_code for r in responses] == [200] * 10 + [429]
    assert responses[0].json() == {"hello": "world"}
    assert responses[0].headers["RateLimit-Policy"] == '"10/minute";q=10;w=60'
    assert responses[0].headers["RateLimit"] == '"10/minute";r=9;t=6'
    assert responses[10].content == BODY_429


def test_fastapi(tmp_path, monkeypatch):
    ns = run_recipe("fastapi", tmp_path, monkeypatch)
    with TestClient(ns["app"]) as client:
        keyed = [client.get("/items", headers={"X-API-Key": "a"}) for _ in range(11)]
        other_key = client.get("/items", headers={"X-API-Key": "b"})
        no_key = client.get("/items")
    assert [r.status_code for r in keyed] == [200] * 10 + [429]
    assert keyed[0].json() == [{"id": 1}]
    assert keyed[10].content == BODY_429
    assert keyed[10].headers["content-type"] == "application/json"
    assert other_key.status_code == 200
    assert no_key.status_code == 200
    assert ns["limiter"].peek("x-api-key:a").remaining == 0


@pytest.mark.parametrize("name", ["flask", "django", "starlette", "fastapi"])
def test_recipes_build_without_side_effects(name, tmp_path, monkeypatch):
    ns = run_recipe(name, tmp_path, monkeypatch)
    assert "limiter" in ns
    assert list(tmp_path.iterdir()) == []
