"""limiter.http.keys: the client-IP trust model, address normalisation, header keys.

Every behaviour of keys.py is pinned here (the module is mutation-tested):
boundaries are tested on both sides and each branch of the parsers has an
input that only it decides.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limiter import RequestInfo
from limiter.http.keys import UNKNOWN_CLIENT, ClientIP, client_ip, header_key, parse_address


def req(peer=None, headers=()):
    return RequestInfo("GET", "/", headers, peer)


XFF = "x-forwarded-for"
FWD = "forwarded"
# A valid address of exactly 100 characters (the zone id is dropped), and 101.
LONG_100 = "fe80::1%" + "a" * 92
LONG_101 = LONG_100 + "a"
assert len(LONG_100) == 100


# -- addresses -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("203.0.113.7", "203.0.113.7"),
        (" 203.0.113.7 ", "203.0.113.7"),
        ("\t203.0.113.7\n", "203.0.113.7"),
        ("203.0.113.7:8080", "203.0.113.7"),
        ('"203.0.113.7:8080"', "203.0.113.7"),
        ('"203.0.113.7"', "203.0.113.7"),
        ("2001:db8::1", "2001:db8::1"),
        ('"2001:db8::1"', "2001:db8::1"),
        ("[2001:db8::1]", "2001:db8::1"),
        ('"[2001:db8::1]"', "2001:db8::1"),
        ("[2001:db8::1]:443", "2001:db8::1"),
        ('"[2001:db8::1]:443"', "2001:db8::1"),
        ("[2001:db8::1]:_p", "2001:db8::1"),
        ("[1.2.3.4]", "1.2.3.4"),  # brackets are for IPv6, but harmless
        ("fe80::1%eth0", "fe80::1"),
        ("[fe80::1%25eth0]:80", "fe80::1"),
        ("::ffff:198.51.100.9", "198.51.100.9"),
        ("[::ffff:198.51.100.9]:1", "198.51.100.9"),
        ("203.0.113.7:_port", "203.0.113.7"),
        ("203.0.113.7:_p", "203.0.113.7"),
        ("203.0.113.7:0", "203.0.113.7"),
        ("203.0.113.7:99999", "203.0.113.7"),  # five digits, not checked against 65535
        ("203.0.113.7:_a.Z-9_", "203.0.113.7"),
        (LONG_100, "fe80::1"),
        ("  " + LONG_100 + "  ", "fe80::1"),  # measured after stripping
        ('"' + LONG_100[:98] + '"', "fe80::1"),  # the quotes count
    ],
)
def test_parse_address_normalises(text, expected):
    assert str(parse_address(text)) == expected


@pytest.mark.parametrize(
    "text",
    [
        "", "   ", "unknown", "_hidden", "example.com", "1.2.3", "01.2.3.4", "1.2.3.4.5", "::1::2",
        "1" * 200, LONG_101,
        # ports: digits or "_" and at least one more character, ASCII only
        "1.2.3.4:", "1.2.3.4:x", "1.2.3.4:ab", "1.2.3.4:_",
        "1.2.3.4:\u0668\u0660", "1.2.3.4:_\u00e9",
        "1.2.3.4:123456", "1.2.3.4:_a b", "1.2.3.4:_a/", "1.2.3.4:_a]", "1.2.3.4:-1",
        "1.2.3.4:80:80", "::ffff:1.2.3.4:80", "[::1]:_a]", "[::1]:123456",
        # quotes: both or none, nothing outside or inside them
        '"', '""', '"1.2.3.4', '"1.2.3.45', '"[2001:db8::1]', '1.2.3.4"', '" 1.2.3.4"',
        '"1.2.3.4"5',
        # brackets
        "[::1", "[::1]x", "[::1]80", "[::1]:", "[::1]:ab", "[::1]:_", "[2001:db8::1", "[]",
        # zone ids belong to IPv6 only
        "1.2.3.4%eth0", "1.2.3.4%eth0:80",
    ],
)  # fmt: skip
def test_parse_address_rejects(text):
    assert parse_address(text) is None


ports = st.one_of(
    st.integers(0, 65535).map(str),
    st.text(alphabet="abcXYZ019._-", min_size=1, max_size=8).map(lambda s: "_" + s),
)


@settings(max_examples=200, deadline=None)
@given(st.ip_addresses(), st.one_of(st.none(), ports), st.booleans())
def test_parse_address_round_trips_every_written_form(address, port, quoted):
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    text = str(address)
    if port is not None:
        text = f"[{text}]:{port}" if address.version == 6 else f"{text}:{port}"
    if quoted:
        text = f'"{text}"'
    assert parse_address(text) == address


# -- the peer ------------------------------------------------------------------


def test_default_key_is_the_peer():
    assert client_ip(req("203.0.113.7")) == "ip:203.0.113.7"
    assert ClientIP()(req("::ffff:203.0.113.7")) == "ip:203.0.113.7"
    assert ClientIP()(req("[2001:db8::1]:443")) == "ip:2001:db8::/64"


def test_ipv6_clients_are_grouped_by_prefix():
    assert ClientIP()(req("2001:db8:1:2:aaaa::1")) == "ip:2001:db8:1:2::/64"
    assert ClientIP()(req("2001:db8:1:2:bbbb::9")) == "ip:2001:db8:1:2::/64"
    assert ClientIP(ipv6_prefix=48)(req("2001:db8:1:2::1")) == "ip:2001:db8:1::/48"
    assert ClientIP(ipv6_prefix=127)(req("2001:db8::1")) == "ip:2001:db8::/127"
    assert ClientIP(ipv6_prefix=128)(req("2001:db8::1")) == "ip:2001:db8::1"
    assert ClientIP(ipv6_prefix=0)(req("2001:db8::1")) == "ip:::/0"
    assert ClientIP(ipv6_prefix=0)(req("203.0.113.7")) == "ip:203.0.113.7"  # IPv4: the address


def test_no_or_unusable_peer_gets_the_fallback_key():
    assert UNKNOWN_CLIENT == "ip:unknown"
    assert ClientIP()(req(None)) == "ip:unknown"
    assert ClientIP()(req("")) == "ip:unknown"
    assert ClientIP()(req("/run/app.sock")) == "ip:unknown"
    assert ClientIP()(req("x" * 10_000)) == "ip:unknown"


def test_peer_length_boundary_and_no_caching_of_long_peers():
    key = ClientIP()
    assert key(req(LONG_100)) == "ip:fe80::/64"
    before = key._classify.cache_info().currsize
    assert key(req(LONG_101)) == "ip:unknown"
    assert key(req("1" * 10_000)) == "ip:unknown"
    assert key(req(None)) == "ip:unknown"
    assert key._classify.cache_info().currsize == before


def test_headers_are_ignored_from_an_untrusted_peer():
    spoof = [("X-Forwarded-For", "1.1.1.1"), ("Forwarded", "for=2.2.2.2")]
    assert ClientIP()(req("203.0.113.7", spoof)) == "ip:203.0.113.7"
    for header in (XFF, FWD):
        assert ClientIP(["10.0.0.0/8"], header=header)(req("203.0.113.7", spoof)) == (
            "ip:203.0.113.7"
        )
        # An IPv4 peer is never inside an IPv6 range, however the integers compare.
        assert ClientIP(["::/0"], header=header)(req("10.0.0.1", spoof)) == "ip:10.0.0.1"
        assert ClientIP(["0.0.0.0/0"], header=header)(req("::a00:1", spoof)) == "ip:::/64"


def test_without_trusted_proxies_no_header_is_read():
    h = [("X-Forwarded-For", "1.1.1.1"), ("Forwarded", "for=2.2.2.2")]
    for header in (None, XFF, FWD):
        assert ClientIP(header=header)(req("203.0.113.7", h)) == "ip:203.0.113.7"
        assert ClientIP(header=header)(req(None, h)) == "ip:unknown"

    def get_all(name):
        raise AssertionError("no header may be read")

    assert ClientIP().from_headers("ip:203.0.113.7", get_all) == "ip:203.0.113.7"


# -- trusted proxies -------------------------------------------------------------

PROXY = "10.0.0.1"
NETS = ["10.0.0.0/8", "2001:db8:ffff::/48"]
ip = ClientIP(NETS, header=XFF)
fwd = ClientIP(NETS, header=FWD)


def test_rightmost_untrusted_entry_is_the_client():
    h = [("X-Forwarded-For", "6.6.6.6, 203.0.113.7, 10.0.0.2")]
    assert ip(req(PROXY, h)) == "ip:203.0.113.7"
    h = [("Forwarded", "for=6.6.6.6, for=203.0.113.7, for=10.0.0.2")]
    assert fwd(req(PROXY, h)) == "ip:203.0.113.7"


def test_every_line_is_joined_in_order():
    h = [("X-Forwarded-For", "6.6.6.6"), ("x-forwarded-for", "203.0.113.7, 10.0.0.2")]
    assert ip(req(PROXY, h)) == "ip:203.0.113.7"
    h = [("X-Forwarded-For", "203.0.113.7, 10.0.0.2"), ("x-forwarded-for", "6.6.6.6")]
    assert ip(req(PROXY, h)) == "ip:6.6.6.6"
    h = [("Forwarded", "for=6.6.6.6"), ("Forwarded", "for=203.0.113.7")]
    assert fwd(req(PROXY, h)) == "ip:203.0.113.7"


def test_forwarded_header():
    h = [("Forwarded", 'for=6.6.6.6, for="[2001:db8::7]:4711";proto=https, For=10.0.0.3')]
    assert fwd(req(PROXY, h)) == "ip:2001:db8::/64"
    h = [("Forwarded", "proto=https;for=198.51.100.1:80;by=10.0.0.1")]
    assert fwd(req(PROXY, h)) == "ip:198.51.100.1"
    h = [("Forwarded", "proto=https; FOR = 198.51.100.1 ;by=10.0.0.1")]
    assert fwd(req(PROXY, h)) == "ip:198.51.100.1"
    h = [("Forwarded", "for;for=198.51.100.1")]  # a pair without "=" is skipped
    assert fwd(req(PROXY, h)) == "ip:198.51.100.1"
    h = [("Forwarded", "for=198.51.100.1;for=6.6.6.6")]  # the first for= of an element
    assert fwd(req(PROXY, h)) == "ip:198.51.100.1"
    h = [("Forwarded", "for=x=y;for=198.51.100.1")]  # ... even when it is invalid
    assert fwd(req(PROXY, h)) == "ip:10.0.0.1"
    h = [("Forwarded", 'for="198.51.100.1"')]  # quoted, no port
    assert fwd(req(PROXY, h)) == "ip:198.51.100.1"


@pytest.mark.parametrize(
    ("header", "value"),
    [
        (XFF, "unknown"),
        (XFF, "_hidden"),
        (XFF, "garbage"),
        (XFF, '"203.0.113.45'),  # an unclosed quote is invalid, not 203.0.113.4
        (FWD, "for=unknown"),
        (FWD, 'for="_gazonk"'),
        (FWD, "proto=https"),  # an element without for=
        (FWD, "for="),
        (FWD, "for= ;proto=https"),  # for= with only whitespace
        (FWD, 'for="203.0.113.45'),
        (FWD, "for=1.2.3.4:ab"),
    ],
)
def test_invalid_entries_fall_back_to_the_peer(header, value):
    key = ClientIP(NETS, header=header)
    first = "203.0.113.7" if header == XFF else "for=203.0.113.7"
    assert key(req(PROXY, [(header, f"{first}, {value}")])) == "ip:10.0.0.1"


def test_all_trusted_means_the_leftmost_and_empty_means_the_peer():
    assert ip(req(PROXY, [("X-Forwarded-For", "10.1.1.1, 10.0.0.2")])) == "ip:10.1.1.1"
    assert ip(req(PROXY, [("X-Forwarded-For", " , ,")])) == "ip:10.0.0.1"
    assert ip(req(PROXY, [("X-Forwarded-For", "")])) == "ip:10.0.0.1"
    assert ip(req(PROXY)) == "ip:10.0.0.1"
    assert ip(req(PROXY, [("X-Forwarded-For", "203.0.113.7,,")])) == "ip:203.0.113.7"
    assert fwd(req(PROXY, [("Forwarded", "for=10.1.1.1, for=10.0.0.2")])) == "ip:10.1.1.1"
    assert fwd(req(PROXY, [("Forwarded", " , ,")])) == "ip:10.0.0.1"
    assert fwd(req(PROXY)) == "ip:10.0.0.1"


def test_a_trailing_empty_forwarded_element_is_skipped():
    assert fwd(req(PROXY, [("Forwarded", "for=203.0.113.7,")])) == "ip:203.0.113.7"
    assert fwd(req(PROXY, [("Forwarded", "for=203.0.113.7, ,")])) == "ip:203.0.113.7"
    assert fwd(req(PROXY, [("Forwarded", "for=203.0.113.7"), ("Forwarded", " ")])) == (
        "ip:203.0.113.7"
    )


def test_entry_length_boundary_and_no_caching_of_long_entries():
    key = ClientIP(["10.0.0.0/8"], header=XFF)
    assert key(req(PROXY, [("X-Forwarded-For", LONG_100)])) == "ip:fe80::/64"
    before = key._classify.cache_info().currsize
    assert key(req(PROXY, [("X-Forwarded-For", LONG_101)])) == "ip:10.0.0.1"
    assert key(req(PROXY, [("X-Forwarded-For", "9" * 10_000)])) == "ip:10.0.0.1"
    assert key._classify.cache_info().currsize == before


def test_results_are_cached_per_entry_up_to_4096():
    key = ClientIP(["10.0.0.0/8"], header=XFF)
    for n in range(4097):
        assert key(req(str(ipaddress.IPv4Address(0xC6120000 + n)))).startswith("ip:198.18.")
    info = key._classify.cache_info()
    assert (info.maxsize, info.currsize) == (4096, 4096)
    # Each ClientIP has its own cache.
    assert ClientIP()._classify.cache_info().currsize == 0


# -- item 8: only the pinned header counts ---------------------------------------------


@pytest.mark.parametrize("extra", ["for=1.1.1.1", "for=10.0.0.9", "for=unknown", "garbage"])
def test_nginx_appends_x_forwarded_for_client_adds_forwarded(extra):
    # nginx: proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    key = ClientIP(["10.0.0.5"], header="x-forwarded-for")
    seen = [("Forwarded", extra), ("X-Forwarded-For", "203.0.113.7")]
    assert key(req("10.0.0.5", seen)) == "ip:203.0.113.7"
    # and with the client's own X-Forwarded-For on the left, appended to:
    seen = [("Forwarded", extra), ("X-Forwarded-For", "1.1.1.1, 203.0.113.7")]
    assert key(req("10.0.0.5", seen)) == "ip:203.0.113.7"


@pytest.mark.parametrize("extra", ["1.1.1.1", "10.0.0.9", "unknown", "garbage, 1.1.1.1"])
def test_proxy_sets_forwarded_client_adds_x_forwarded_for(extra):
    # nginx: proxy_set_header Forwarded "for=$remote_addr";
    key = ClientIP(["10.0.0.5"], header="forwarded")
    seen = [("X-Forwarded-For", extra), ("Forwarded", "for=203.0.113.7")]
    assert key(req("10.0.0.5", seen)) == "ip:203.0.113.7"


def test_an_invalid_header_beside_a_valid_one_only_the_pinned_one_counts():
    seen = [("X-Forwarded-For", "garbage"), ("Forwarded", "for=203.0.113.7")]
    assert ClientIP(NETS, header=FWD)(req(PROXY, seen)) == "ip:203.0.113.7"
    assert ClientIP(NETS, header=XFF)(req(PROXY, seen)) == "ip:10.0.0.1"
    seen = [("X-Forwarded-For", "203.0.113.7"), ("Forwarded", "for=garbage")]
    assert ClientIP(NETS, header=XFF)(req(PROXY, seen)) == "ip:203.0.113.7"
    assert ClientIP(NETS, header=FWD)(req(PROXY, seen)) == "ip:10.0.0.1"


@pytest.mark.parametrize("trusted", [["10.0.0.5"], "10.0.0.5", ["unix"], "unix", ["::1", "unix"]])
def test_header_is_required_with_trusted_proxies(trusted):
    with pytest.raises(ValueError) as info:
        ClientIP(trusted)
    assert str(info.value) == (
        "header must be set when trusted_proxies is: pass header='x-forwarded-for' or "
        "header='forwarded' (proxy_header= on the adapters), the one your proxy sets; "
        "a client behind the proxy can add the other header itself, got header=None"
    )
    with pytest.raises(ValueError, match="header='x-forwarded-for'"):
        client_ip(req("10.0.0.5"), trusted_proxies=trusted)


@pytest.mark.parametrize("header", ["Forwarded", "FORWARDED", "forwarded"])
def test_header_is_case_insensitive(header):
    key = ClientIP([PROXY], header=header)
    assert key.header == "forwarded"
    h = [("X-Forwarded-For", "6.6.6.6"), ("forwarded", "for=203.0.113.7")]
    assert key(req(PROXY, h)) == "ip:203.0.113.7"
    assert ClientIP([PROXY], header="X-Forwarded-For").header == "x-forwarded-for"


# -- trusted proxy forms -----------------------------------------------------------


def test_trusted_ipv6_and_mapped_proxies():
    h = [("X-Forwarded-For", "203.0.113.7")]
    assert ip(req("2001:db8:ffff::5", h)) == "ip:203.0.113.7"
    assert ip(req("::ffff:10.0.0.1", h)) == "ip:203.0.113.7"
    assert ip(req("[2001:db8:ffff::5]:1234", h)) == "ip:203.0.113.7"
    assert ip(req("2001:db8:fffe::5", h)) == "ip:2001:db8:fffe::/64"


def test_ipv4_mapped_trusted_entries_match_ipv4_peers():
    h = [("X-Forwarded-For", "203.0.113.7")]
    one = ClientIP("::ffff:10.0.0.5", header=XFF)
    assert one(req("10.0.0.5", h)) == "ip:203.0.113.7"
    assert one(req("::ffff:10.0.0.5", h)) == "ip:203.0.113.7"
    assert one(req("10.0.0.6", h)) == "ip:10.0.0.6"
    net = ClientIP(["::ffff:10.0.0.0/104"], header=XFF)  # = 10.0.0.0/8
    assert net(req("10.0.0.1", h)) == "ip:203.0.113.7"
    assert net(req("10.255.255.255", h)) == "ip:203.0.113.7"
    assert net(req("11.0.0.0", h)) == "ip:11.0.0.0"
    assert net(req("9.255.255.255", h)) == "ip:9.255.255.255"
    assert net.trusted_proxies == ("::ffff:10.0.0.0/104",)


def test_cidr_boundaries_and_entry_forms():
    h = [("X-Forwarded-For", "203.0.113.7")]
    key = ClientIP([" 10.0.0.0/30 ", "192.168.0.0/255.255.0.0"], header=XFF)
    assert key(req("10.0.0.3", h)) == "ip:203.0.113.7"
    assert key(req("10.0.0.4", h)) == "ip:10.0.0.4"
    assert key(req("192.168.255.255", h)) == "ip:203.0.113.7"
    assert key(req("192.169.0.0", h)) == "ip:192.169.0.0"


@pytest.mark.parametrize("trusted", [["unix", "10.0.0.0/8"], ["10.0.0.0/8", "unix"]])
def test_unix_and_cidrs_together(trusted):
    key = ClientIP(trusted, header=XFF)
    h = [("X-Forwarded-For", "203.0.113.7")]
    assert key(req(None, h)) == "ip:203.0.113.7"
    assert key(req("10.9.9.9", h)) == "ip:203.0.113.7"
    assert key(req("203.0.113.9", h)) == "ip:203.0.113.9"


def test_unix_socket_proxy():
    h = [("X-Forwarded-For", "203.0.113.7")]
    assert ClientIP()(req(None, h)) == "ip:unknown"
    unix = ClientIP("unix", header=XFF)
    assert unix(req(None, h)) == "ip:203.0.113.7"
    assert unix(req("/run/app.sock", h)) == "ip:203.0.113.7"  # a peer that is no IP
    assert unix(req(LONG_101, h)) == "ip:203.0.113.7"
    assert unix(req(None)) == "ip:unknown"
    assert unix(req(None, [("X-Forwarded-For", "garbage")])) == "ip:unknown"
    assert unix(req("203.0.113.9", h)) == "ip:203.0.113.9"
    assert unix.trusted_proxies == ("unix",)
    fwd_unix = ClientIP(["unix"], header=FWD)
    assert fwd_unix(req(None, [("Forwarded", "for=203.0.113.7")])) == "ip:203.0.113.7"


def test_attributes_and_repr():
    key = ClientIP(["10.0.0.0/8", "unix"], 48, header="Forwarded")
    assert key.trusted_proxies == ("10.0.0.0/8", "unix")
    assert key.ipv6_prefix == 48
    assert key.header == "forwarded"
    assert repr(key) == (
        "ClientIP(trusted_proxies=('10.0.0.0/8', 'unix'), ipv6_prefix=48, header='forwarded')"
    )
    assert repr(ClientIP()) == "ClientIP(trusted_proxies=(), ipv6_prefix=64, header=None)"
    assert ClientIP(iter(["10.0.0.1"]), header=XFF).trusted_proxies == ("10.0.0.1",)
    assert ClientIP({"10.0.0.1"}, header=XFF).trusted_proxies == ("10.0.0.1",)


def test_client_ip_function_accepts_the_same_options():
    h = [("X-Forwarded-For", "203.0.113.7"), ("Forwarded", "for=198.51.100.1")]
    assert client_ip(req(PROXY, h), trusted_proxies="10.0.0.1", header=XFF) == "ip:203.0.113.7"
    assert client_ip(req(PROXY, h), trusted_proxies=["10.0.0.0/8"], header="Forwarded") == (
        "ip:198.51.100.1"
    )
    assert client_ip(req(PROXY, h)) == "ip:10.0.0.1"
    assert client_ip(req(PROXY, h), header=XFF) == "ip:10.0.0.1"
    assert client_ip(req("2001:db8::1"), ipv6_prefix=32) == "ip:2001:db8::/32"
    assert client_ip(req("2001:db8:1:2:aaaa::1")) == "ip:2001:db8:1:2::/64"


def test_client_ip_caches_options_by_type():
    from limiter.http.keys import _client_ip

    assert _client_ip.cache_info().maxsize == 32
    _client_ip.cache_clear()
    h = [("X-Forwarded-For", "203.0.113.7")]
    for _ in range(3):
        assert client_ip(req(PROXY, h), trusted_proxies=[PROXY], header=XFF) == "ip:203.0.113.7"
    info = _client_ip.cache_info()
    assert (info.hits, info.currsize) == (2, 1)
    assert client_ip(req("2001:db8::1"), ipv6_prefix=1) == "ip:::/1"
    # 1.0 == True == 1, but only the int is an ipv6_prefix.
    with pytest.raises(TypeError, match="ipv6_prefix"):
        client_ip(req("2001:db8::1"), ipv6_prefix=1.0)
    with pytest.raises(TypeError, match="ipv6_prefix"):
        client_ip(req("2001:db8::1"), ipv6_prefix=True)


# -- option errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"ipv6_prefix": "64"}, "ipv6_prefix must be an int from 0 to 128, got '64'"),
        ({"ipv6_prefix": 64.0}, "ipv6_prefix .* got 64.0"),
        ({"ipv6_prefix": True}, "ipv6_prefix .* got True"),
        ({"ipv6_prefix": None}, "ipv6_prefix .* got None"),
        ({"ipv6_prefix": [64]}, r"ipv6_prefix .* got \[64\]"),
        ({"header": 5}, "header must be 'x-forwarded-for' or 'forwarded', got 5"),
        ({"header": b"forwarded"}, "header .* got b'forwarded'"),
        ({"header": ["forwarded"]}, r"header .* got \['forwarded'\]"),
        ({"trusted_proxies": 5}, "trusted_proxies must be a str or an iterable of str, got 5"),
        ({"trusted_proxies": None}, "trusted_proxies .* got None"),
        ({"trusted_proxies": b"10.0.0.1"}, "trusted_proxies .* got b'10.0.0.1'"),
        ({"trusted_proxies": bytearray(b"10.0.0.1")}, "trusted_proxies .* got bytearray"),
        ({"trusted_proxies": [5]}, "trusted_proxies entries must be str, got 5"),
        ({"trusted_proxies": ["10.0.0.1", None]}, "trusted_proxies entries .* got None"),
        (
            {"trusted_proxies": [ipaddress.ip_network("10.0.0.0/8")]},
            "trusted_proxies entries .* got IPv4Network",
        ),
    ],
)
def test_wrong_types_are_type_errors_naming_the_value(kwargs, needle):
    with pytest.raises(TypeError, match=needle):
        ClientIP(**{"header": XFF, **kwargs})
    with pytest.raises(TypeError, match=needle):
        client_ip(req("10.0.0.1"), **{"header": XFF, **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"trusted_proxies": ["10.0.0.0/33"]}, "IPs, CIDRs or 'unix', got '10.0.0.0/33'"),
        ({"trusted_proxies": ["proxy.local"]}, "got 'proxy.local'"),
        ({"trusted_proxies": [""]}, "got ''"),
        ({"trusted_proxies": ["UNIX"]}, "got 'UNIX'"),
        ({"trusted_proxies": ["10.0.0.0/8", "nope"]}, "got 'nope'"),
        ({"ipv6_prefix": 129}, "ipv6_prefix must be an int from 0 to 128, got 129"),
        ({"ipv6_prefix": -1}, "got -1"),
        (
            {"header": "x-real-ip"},
            "header must be 'x-forwarded-for' or 'forwarded', got 'x-real-ip'",
        ),
        ({"header": ""}, "got ''"),
        ({"header": " forwarded"}, "got ' forwarded'"),
    ],
)
def test_bad_values_are_value_errors_naming_the_value(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        ClientIP(**{"header": XFF, **kwargs})


@pytest.mark.parametrize("prefix", [0, 1, 64, 127, 128])
def test_every_ipv6_prefix_from_0_to_128_is_accepted(prefix):
    assert ClientIP(ipv6_prefix=prefix).ipv6_prefix == prefix


@pytest.mark.parametrize(
    ("entry", "network", "host"),
    [("10.0.0.1/8", "10.0.0.0/8", "10.0.0.1"), ("2001:db8::1/32", "2001:db8::/32", "2001:db8::1")],
)
def test_host_bits_set_is_a_value_error_that_suggests_both_readings(entry, network, host):
    with pytest.raises(ValueError, match="host bits") as info:
        ClientIP([entry], header=XFF)
    assert f"got {entry!r}" in str(info.value)
    assert f"{network!r} for the network" in str(info.value)
    assert f"{host!r} for one host" in str(info.value)


# -- header keys -------------------------------------------------------------------


def test_header_key():
    by_key = header_key("X-API-Key")
    assert by_key(req("1.2.3.4", {"x-api-key": "k1"})) == "x-api-key:k1"
    assert by_key(req("1.2.3.4", {"X-Api-Key": "k1"})) == "x-api-key:k1"
    # Sent twice: the client IP. Starlette and http.server show the app the first line
    # only, so a key of both lines let one valid key take a new bucket per junk line.
    assert by_key(req("1.2.3.4", [("X-API-Key", "a"), ("X-API-Key", "b")])) is None
    assert by_key(req("1.2.3.4", {})) is None
    assert by_key(req("1.2.3.4", {"X-API-Key": ""})) is None
    assert header_key("X-API-Key", prefix="")(req(None, {"X-API-Key": "k"})) == "k"
    assert header_key("X-API-Key", prefix="api=")(req(None, {"X-API-Key": "k"})) == "api=k"
    assert by_key.__name__ == by_key.__qualname__ == "header_key_x_api_key"


def test_header_key_accepts_every_token_character():
    name = "!#$%&'*+-.^_`|~09AZaz"
    assert header_key(name)(req(None, {name: "v"})) == name.lower() + ":v"


@pytest.mark.parametrize("name", ["", "X API Key", "X-API-Key:", "X-API-Key\n", "X-\u00e9", "(x)"])
def test_header_key_rejects_what_is_no_header_name(name):
    with pytest.raises(ValueError, match="name must be a header name such as 'X-API-Key', got "):
        header_key(name)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"name": None}, r"name must be a header name \(str\), got None"),
        ({"name": b"X-API-Key"}, "name .* got b'X-API-Key'"),
        ({"name": "X-API-Key", "prefix": 5}, "prefix must be a str or None, got 5"),
        ({"name": "X-API-Key", "prefix": b"k:"}, "prefix .* got b'k:'"),
    ],
)
def test_header_key_wrong_types_are_type_errors(kwargs, needle):
    with pytest.raises(TypeError, match=needle):
        header_key(**kwargs)


# -- fuzzing ------------------------------------------------------------------------

junk_text = st.text(
    alphabet=st.sampled_from(list(' ,;="[]:%_.-\t') + list("0123456789abcdefforFORunknown")),
    max_size=60,
)
public_v4 = st.ip_addresses(v=4).filter(lambda a: a not in ipaddress.ip_network("10.0.0.0/8"))
trusted_v4 = st.ip_addresses(network="10.0.0.0/8")
FUZZ = {XFF: ClientIP(["10.0.0.0/8"], header=XFF), FWD: ClientIP(["10.0.0.0/8"], header=FWD)}


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["X-Forwarded-For", "Forwarded", "x-real-ip"]), st.text())),
    st.one_of(st.none(), st.text(max_size=50)),
)
def test_fuzz_never_raises(headers, peer):
    everyone = ["0.0.0.0/0", "::/0", "unix"]
    for key_func in (*FUZZ.values(), ClientIP(everyone, header=FWD), ClientIP()):
        key = key_func(req(peer, headers))
        assert isinstance(key, str)
        assert key.startswith("ip:")


@settings(max_examples=300, deadline=None)
@given(
    junk=st.lists(junk_text, max_size=3),
    other_junk=st.lists(junk_text, max_size=2),
    client=public_v4,
    hops=st.lists(trusted_v4, max_size=3),
    peer=trusted_v4,
    use_forwarded=st.booleans(),
    same_line=st.booleans(),
)
def test_fuzz_client_supplied_entries_are_never_chosen(
    junk, other_junk, client, hops, peer, use_forwarded, same_line
):
    # The client sends any headers it likes, both of them; trusted proxies then
    # append the real client and themselves to the one they set.  The key must
    # be the real client.
    if use_forwarded:
        name, other, appended = FWD, XFF, [f"for={a}" for a in (client, *hops)]
    else:
        name, other, appended = XFF, FWD, [str(a) for a in (client, *hops)]
    lines = [(name, j) for j in junk]
    if same_line and lines:
        lines[-1] = (name, lines[-1][1] + ", " + ", ".join(appended))
    else:
        lines.append((name, ", ".join(appended)))
    lines += [(other, j) for j in other_junk]
    assert FUZZ[name](req(str(peer), lines)) == f"ip:{client}"


# -- what mutation testing found unpinned (issue 9, item 14; docs/testing.md) ------


@pytest.mark.parametrize(
    "text", ["[fe80::1%eth0]x]", "[fe80::1%eth0]:80]", "[fe80::1%a]]", '"[fe80::1%a]:80]"']
)
def test_parse_address_ends_a_bracketed_address_at_its_first_closing_bracket(text):
    # What follows the first "]" must be a port, even where a zone id could
    # swallow a second "]": these are garbage, not fe80::1.
    assert parse_address(text) is None
    proxy = ClientIP(["10.0.0.0/8"], header=XFF)
    assert proxy(req(PROXY, [(XFF, f"203.0.113.7, {text}")])) == f"ip:{PROXY}"


def test_allow_list_never_lists_a_client_hidden_behind_a_listed_trusted_proxy():
    from limiter.http.keys import AllowList

    client_ip = ClientIP(["10.0.0.1"], header="x-forwarded-for")
    allow = AllowList(["10.0.0.0/8"], client_ip)

    def listed(xff, peer="10.0.0.1"):
        headers = {} if xff is None else {"X-Forwarded-For": xff}
        return allow(RequestInfo("GET", "/", headers, peer=peer))

    assert listed("10.2.3.4")  # an internal client, named by the proxy
    assert not listed("6.6.6.6")
    assert not listed("10.2.3.4, 6.6.6.6")  # the client's own entry does not count
    # No usable entry: the walk ends at the proxy, which is no client.
    for xff in (None, "", "unknown", "garbage", "6.6.6.6, garbage", "_hidden"):
        assert not listed(xff), xff
    assert not listed("10.2.3.4", peer="11.9.9.9")  # an untrusted peer: its header is ignored
    assert listed("6.6.6.6", peer="10.9.9.9")  # ...and it is listed by its own address
    assert not allow(RequestInfo("GET", "/", {}, peer=None))
    assert repr(allow) == "AllowList(['10.0.0.0/8'])" and allow and not AllowList((), client_ip)
    with pytest.raises(TypeError, match=r"client_ip must be a limiter\.http\.keys\.ClientIP"):
        AllowList(["10.0.0.0/8"], "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="allow_list must be a str or an iterable"):
        AllowList(5, client_ip)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="allow_list entries must be IPs or CIDRs, got 'nope'"):
        AllowList(["nope"], client_ip)
