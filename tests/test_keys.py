"""limiter.keys: the client-IP trust model, address normalisation, header keys."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limiter.adapters import RequestInfo
from limiter.keys import UNKNOWN_CLIENT, ClientIP, client_ip, header_key, parse_address


def req(peer=None, headers=()):
    return RequestInfo("GET", "/", headers, peer)


# -- addresses -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("203.0.113.7", "203.0.113.7"),
        (" 203.0.113.7 ", "203.0.113.7"),
        ("203.0.113.7:8080", "203.0.113.7"),
        ('"203.0.113.7:8080"', "203.0.113.7"),
        ("2001:db8::1", "2001:db8::1"),
        ("[2001:db8::1]", "2001:db8::1"),
        ("[2001:db8::1]:443", "2001:db8::1"),
        ('"[2001:db8::1]:443"', "2001:db8::1"),
        ("fe80::1%eth0", "fe80::1"),
        ("[fe80::1%25eth0]:80", "fe80::1"),
        ("::ffff:198.51.100.9", "198.51.100.9"),
        ("[::ffff:198.51.100.9]:1", "198.51.100.9"),
        ("203.0.113.7:_port", "203.0.113.7"),
    ],
)
def test_parse_address_normalises(text, expected):
    assert str(parse_address(text)) == expected


@pytest.mark.parametrize(
    "text",
    ["", "unknown", "_hidden", "example.com", "1.2.3", "1.2.3.4:", "1.2.3.4:x", "[::1", "[::1]x",
     '"1.2.3.4', "01.2.3.4", "1.2.3.4.5", "1" * 200, "::1::2", '""', "::ffff:1.2.3.4:80"],
)  # fmt: skip
def test_parse_address_rejects(text):
    assert parse_address(text) is None


# -- the peer ------------------------------------------------------------------


def test_default_key_is_the_peer():
    assert client_ip(req("203.0.113.7")) == "ip:203.0.113.7"
    assert ClientIP()(req("::ffff:203.0.113.7")) == "ip:203.0.113.7"


def test_ipv6_clients_are_grouped_by_prefix():
    assert ClientIP()(req("2001:db8:1:2:aaaa::1")) == "ip:2001:db8:1:2::/64"
    assert ClientIP()(req("2001:db8:1:2:bbbb::9")) == "ip:2001:db8:1:2::/64"
    assert ClientIP(ipv6_prefix=48)(req("2001:db8:1:2::1")) == "ip:2001:db8:1::/48"
    assert ClientIP(ipv6_prefix=128)(req("2001:db8::1")) == "ip:2001:db8::1"
    assert ClientIP(ipv6_prefix=0)(req("2001:db8::1")) == "ip:::/0"


def test_no_or_unusable_peer_gets_the_fallback_key():
    assert UNKNOWN_CLIENT == "ip:unknown"
    assert ClientIP()(req(None)) == "ip:unknown"
    assert ClientIP()(req("/run/app.sock")) == "ip:unknown"
    assert ClientIP()(req("x" * 10_000)) == "ip:unknown"


def test_headers_are_ignored_from_an_untrusted_peer():
    spoof = [("X-Forwarded-For", "1.1.1.1"), ("Forwarded", "for=2.2.2.2")]
    assert ClientIP()(req("203.0.113.7", spoof)) == "ip:203.0.113.7"
    assert ClientIP(["10.0.0.0/8"])(req("203.0.113.7", spoof)) == "ip:203.0.113.7"


# -- trusted proxies -------------------------------------------------------------

PROXY = "10.0.0.1"
ip = ClientIP(["10.0.0.0/8", "2001:db8:ffff::/48"])


def test_rightmost_untrusted_entry_is_the_client():
    h = [("X-Forwarded-For", "6.6.6.6, 203.0.113.7, 10.0.0.2")]
    assert ip(req(PROXY, h)) == "ip:203.0.113.7"


def test_every_line_is_joined_in_order():
    h = [("X-Forwarded-For", "6.6.6.6"), ("x-forwarded-for", "203.0.113.7, 10.0.0.2")]
    assert ip(req(PROXY, h)) == "ip:203.0.113.7"
    h = [("X-Forwarded-For", "203.0.113.7, 10.0.0.2"), ("x-forwarded-for", "6.6.6.6")]
    assert ip(req(PROXY, h)) == "ip:6.6.6.6"


def test_forwarded_header():
    h = [("Forwarded", 'for=6.6.6.6, for="[2001:db8::7]:4711";proto=https, For=10.0.0.3')]
    assert ip(req(PROXY, h)) == "ip:2001:db8::/64"
    h = [("Forwarded", "proto=https;for=198.51.100.1:80;by=10.0.0.1")]
    assert ip(req(PROXY, h)) == "ip:198.51.100.1"


@pytest.mark.parametrize(
    "value",
    ["unknown", "_hidden", "garbage", "for=unknown", 'for="_gazonk"', "proto=https", "for="],
)
def test_invalid_entries_fall_back_to_the_peer(value):
    name = "Forwarded" if "=" in value else "X-Forwarded-For"
    h = [(name, f"203.0.113.7, {value}")]
    assert ip(req(PROXY, h)) == "ip:10.0.0.1"


def test_all_trusted_means_the_leftmost_and_empty_means_the_peer():
    assert ip(req(PROXY, [("X-Forwarded-For", "10.1.1.1, 10.0.0.2")])) == "ip:10.1.1.1"
    assert ip(req(PROXY, [("X-Forwarded-For", " , ,")])) == "ip:10.0.0.1"
    assert ip(req(PROXY, [("X-Forwarded-For", "203.0.113.7,,")])) == "ip:203.0.113.7"


def test_both_headers_must_agree():
    xff = ("X-Forwarded-For", "203.0.113.7")
    assert ip(req(PROXY, [xff, ("Forwarded", "for=203.0.113.7")])) == "ip:203.0.113.7"
    assert ip(req(PROXY, [xff, ("Forwarded", "for=6.6.6.6")])) == "ip:10.0.0.1"
    pinned = ClientIP(["10.0.0.0/8"], header="X-Forwarded-For")
    assert pinned(req(PROXY, [xff, ("Forwarded", "for=6.6.6.6")])) == "ip:203.0.113.7"


def test_trusted_ipv6_and_mapped_proxies():
    h = [("X-Forwarded-For", "203.0.113.7")]
    assert ip(req("2001:db8:ffff::5", h)) == "ip:203.0.113.7"
    assert ip(req("::ffff:10.0.0.1", h)) == "ip:203.0.113.7"
    assert ip(req("[2001:db8:ffff::5]:1234", h)) == "ip:203.0.113.7"


def test_unix_socket_proxy():
    h = [("X-Forwarded-For", "203.0.113.7")]
    assert ClientIP()(req(None, h)) == "ip:unknown"
    assert ClientIP("unix")(req(None, h)) == "ip:203.0.113.7"
    assert ClientIP("unix")(req(None)) == "ip:unknown"
    assert ClientIP("unix")(req("203.0.113.9", h)) == "ip:203.0.113.9"


def test_client_ip_function_accepts_the_same_options():
    h = [("X-Forwarded-For", "203.0.113.7")]
    assert client_ip(req(PROXY, h), trusted_proxies="10.0.0.1") == "ip:203.0.113.7"
    assert client_ip(req(PROXY, h), trusted_proxies=["10.0.0.0/8"]) == "ip:203.0.113.7"
    assert client_ip(req(PROXY, h)) == "ip:10.0.0.1"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"trusted_proxies": ["10.0.0.0/33"]}, "10.0.0.0/33"),
        ({"trusted_proxies": ["proxy.local"]}, "proxy.local"),
        ({"ipv6_prefix": 129}, "129"),
        ({"ipv6_prefix": True}, "True"),
        ({"header": "x-real-ip"}, "x-real-ip"),
    ],
)
def test_bad_options_are_value_errors_naming_the_value(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        ClientIP(**kwargs)


# -- header keys -------------------------------------------------------------------


def test_header_key():
    by_key = header_key("X-API-Key")
    assert by_key(req("1.2.3.4", {"x-api-key": "k1"})) == "x-api-key:k1"
    assert by_key(req("1.2.3.4", {"X-Api-Key": "k1"})) == "x-api-key:k1"
    assert by_key(req("1.2.3.4", {})) is None
    assert by_key(req("1.2.3.4", {"X-API-Key": ""})) is None
    assert header_key("X-API-Key", prefix="")(req(None, {"X-API-Key": "k"})) == "k"
    with pytest.raises(ValueError):
        header_key("")


# -- fuzzing ------------------------------------------------------------------------

junk_text = st.text(
    alphabet=st.sampled_from(list(' ,;="[]:%_.-\t') + list("0123456789abcdefforFORunknown")),
    max_size=60,
)
public_v4 = st.ip_addresses(v=4).filter(lambda a: a not in ipaddress.ip_network("10.0.0.0/8"))
trusted_v4 = st.ip_addresses(network="10.0.0.0/8")
FUZZ_IP = ClientIP(["10.0.0.0/8"])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["X-Forwarded-For", "Forwarded", "x-real-ip"]), st.text())),
    st.one_of(st.none(), st.text(max_size=50)),
)
def test_fuzz_never_raises(headers, peer):
    for key_func in (FUZZ_IP, ClientIP(["0.0.0.0/0", "::/0", "unix"]), ClientIP()):
        key = key_func(req(peer, headers))
        assert isinstance(key, str)
        assert key.startswith("ip:")


@settings(max_examples=300, deadline=None)
@given(
    junk=st.lists(junk_text, max_size=3),
    client=public_v4,
    hops=st.lists(trusted_v4, max_size=3),
    peer=trusted_v4,
    use_forwarded=st.booleans(),
    same_line=st.booleans(),
)
def test_fuzz_client_supplied_entries_are_never_chosen(
    junk, client, hops, peer, use_forwarded, same_line
):
    # The client sends any header it likes; trusted proxies then append the
    # real client and themselves.  The key must be the real client.
    if use_forwarded:
        name, appended = "Forwarded", [f"for={a}" for a in (client, *hops)]
    else:
        name, appended = "X-Forwarded-For", [str(a) for a in (client, *hops)]
    lines = [(name, j) for j in junk]
    if same_line and lines:
        lines[-1] = (name, lines[-1][1] + ", " + ", ".join(appended))
    else:
        lines.append((name, ", ".join(appended)))
    assert FUZZ_IP(req(str(peer), lines)) == f"ip:{client}"
