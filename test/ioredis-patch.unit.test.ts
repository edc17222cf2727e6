/**
 * patches/ioredis+5.11.1.patch: a Cluster client's periodic slot refresh (slotsRefreshInterval, which
 * src/reservation/client.ts sets) stops for good when the client quits. Unpatched, a quit that lands while a
 * refresh is in flight clears the timer that already fired, and the refresh's callback arms a new one: the
 * client then refreshes every interval forever and keeps its process alive (a clean-clone CI run hung at
 * Jest's exit on it).
 */
import { Cluster } from 'ioredis';

/** The private members the patch touches (ioredis 5.11.1, built/cluster/index.js). */
type Refreshing = { slotsTimer: NodeJS.Timeout | null; resetNodesRefreshInterval(): void; refreshSlotsCache(callback: () => void): void };

test('a quit during an in-flight slot refresh leaves no refresh timer behind', async () => {
  const cluster = new Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true, slotsRefreshInterval: 20 });
  const refreshing = cluster as unknown as Refreshing;
  let refreshes = 0;
  // A refresh that takes 100 ms, as a slow or unreachable node makes it.
  refreshing.refreshSlotsCache = (callback) => {
    refreshes += 1;
    setTimeout(callback, 100);
  };
  refreshing.resetNodesRefreshInterval();
  try {
    await new Promise((r) => setTimeout(r, 40));
    expect(refreshes).toBe(1);
    cluster.disconnect();
    await new Promise((r) => setTimeout(r, 200));
    expect(refreshing.slotsTimer).toBeNull();
    expect(refreshes).toBe(1);
  } finally {
    // Without the patch the loop would outlive the test and keep Jest from exiting: end it by hand.
    refreshing.refreshSlotsCache = () => undefined;
    if (refreshing.slotsTimer) clearTimeout(refreshing.slotsTimer);
  }
});
