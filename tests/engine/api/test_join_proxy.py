"""A room behind a tunnel is not one person: 20 phones reach /join through a small reverse proxy (so the
server sees one address for all of them), each with its own limits from its signed cookie, their address
an outer bound; X-Forwarded-For counts only from the proxy named in the setting."""
from __future__ import annotations

import asyncio

import httpx
import pytest

from engine.room.access import PHONE_COOKIE, Access, proxy_networks
from engine.api.server import create_app
from engine.room.limits import ClientLimiter, ClientLimits
from engine.events import RequestEvent
from proxy_helpers import PROXY_ADDRESS, reverse_proxy
from service_helpers import assert_all_free, serve, service_fixture

LIMITS = ClientLimits(burst=2, per_minute=1, max_in_flight=2, max_tokens=4)
UNTRUSTED = "127.0.0.3"      # anyone else (uvicorn itself believes only 127.0.0.1 and ::1 by default)


svc = service_fixture(strategies=("continuous",), limits=LIMITS, max_model_len=512,
                      access=Access(room=True, token="proxy-test-token-1", trusted_proxies=proxy_networks(PROXY_ADDRESS)))


@pytest.fixture(scope="module")
def urls(svc):
    with serve(create_app(svc)) as server, serve(reverse_proxy(server)) as proxy:
        yield server, proxy


@pytest.fixture(autouse=True)
def _fresh(svc):
    svc.limiter = ClientLimiter(LIMITS, clock=lambda: 0.0)  # no refill mid-test: the counts, not the timing
    yield
    assert_all_free(svc)


async def phone(base: str, asks: int) -> list[int]:
    """A browser: opens /join (its cookie), then asks `asks` times; the statuses it got."""
    async with httpx.AsyncClient(base_url=f"http://{base}", timeout=60) as c:
        assert (await c.get("/join")).status_code == 200 and PHONE_COOKIE in c.cookies
        statuses = []
        for i in range(asks):
            r = await c.post("/join/ask", json={"name": f"p{i}", "prompt": "Say hi"})
            statuses.append(r.status_code)
        return statuses


def test_twenty_phones_behind_one_tunnel_each_get_their_own_limits(urls, svc):
    _, proxy = urls
    since = svc.hub.head
    async def room():
        return await asyncio.gather(*(phone(proxy, 3) for _ in range(20)))
    results = asyncio.run(asyncio.wait_for(room(), 120))
    assert all(r == [200, 200, 429] for r in results), results  # its burst of 2, then its own limit
    tenants = {e.tenant for _, e in svc.hub.read(since).events if isinstance(e, RequestEvent)}
    assert len(tenants) == 20 and all(t.startswith("viewer ") for t in tenants)  # no phone id shown


def test_the_address_behind_the_phones_is_an_outer_bound(urls, svc):
    """Clearing the cookie buys a fresh phone's allowance, but never more than the address's."""
    _, proxy = urls
    outer = svc.limiter.outer_limits.burst

    async def fresh_phones(n: int) -> list[int]:
        return [s for r in await asyncio.gather(*(phone(proxy, 1) for _ in range(n))) for s in r]
    statuses = asyncio.run(asyncio.wait_for(fresh_phones(outer + 6), 180))
    assert statuses.count(200) == outer and statuses.count(429) == 6


def test_a_forged_forwarded_for_from_an_untrusted_address_changes_nothing(urls, svc):
    server, _ = urls
    since = svc.hub.head
    direct = httpx.HTTPTransport(local_address=UNTRUSTED)  # straight to the server, not through the proxy
    with httpx.Client(base_url=f"http://{server}", timeout=60, transport=direct) as c:
        codes = [c.post("/join/ask", json={"name": "x", "prompt": "Say hi"},
                        headers={"X-Forwarded-For": f"10.0.0.{i}"}).status_code for i in range(3)]
    assert codes == [200, 200, 429]  # one client, its own address: the header was ignored
    tenants = {e.tenant for _, e in svc.hub.read(since).events if isinstance(e, RequestEvent)}
    assert tenants == {svc.access.tenant_of(f"ip:{UNTRUSTED}")}


def test_only_the_proxy_named_is_trusted_and_only_the_server_signs_ids():
    a = Access(room=True, trusted_proxies=proxy_networks("10.0.0.0/8, 192.168.1.5"))
    assert a.address("10.1.2.3", "203.0.113.7, 10.9.9.9") == "203.0.113.7"  # the last hop not a proxy
    assert a.address("192.168.1.5", "203.0.113.7") == "203.0.113.7"
    assert a.address("198.51.100.1", "203.0.113.7") == "198.51.100.1"       # not a proxy: its own address
    assert a.address("10.1.2.3", "not-an-ip") == "10.1.2.3"
    cookie = a.phone_cookie()
    assert a.phone_id(cookie) and a.phone_id(cookie + "x") is None and a.phone_id("abc.def") is None
    assert Access(room=True).phone_id(cookie) is None  # a new start: a new secret
    with pytest.raises(ValueError, match="INFLIGHT_TRUSTED_PROXIES"):
        proxy_networks("10.0.0.0/8, nonsense")
