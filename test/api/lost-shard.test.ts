/** A sale's one stock shard loses its data with orders in flight, then rebuilt (test/support/lostShard.ts), on one Redis. */
import { testConfig } from '../support/helpers';
import { lostShardSuite } from '../support/lostShard';

// Workflows wait for no worker until the rebuild: the starter's backlog gate must not hold their starts.
lostShardSuite(testConfig({ STARTER_MAX_BACKLOG: '10000' }), 1, 0);
