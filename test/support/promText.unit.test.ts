/** Reading Prometheus text expositions as the demo and the drain bench read Core's worker metrics (pure logic). */
import { bucketQuantile, countAbove, counter, counterBy, histogram } from './promText';

const TEXT = [
  '# HELP temporal_sticky_cache_miss x',
  'temporal_sticky_cache_miss{namespace="a",task_queue="q1"} 3',
  'temporal_sticky_cache_miss{namespace="a",task_queue="q2"} 4',
  'temporal_sticky_cache_miss_total_other 100',
  'temporal_wft_bucket{task_queue="q1",le="10"} 5',
  'temporal_wft_bucket{task_queue="q1",le="100"} 8',
  'temporal_wft_bucket{task_queue="q1",le="+Inf"} 9',
  'temporal_wft_bucket{le="10",task_queue="q2"} 1',
  'temporal_wft_bucket{le="100",task_queue="q2"} 1',
  'temporal_wft_bucket{le="+Inf",task_queue="q2"} 1',
  'temporal_wft_sum{task_queue="q1"} 400',
  'temporal_wft_sum{task_queue="q2"} 2',
  'temporal_wft_count{task_queue="q1"} 9',
  'temporal_wft_count{task_queue="q2"} 1',
].join('\n');

test('a counter is summed over its label sets, and a longer name with the same prefix is not counted', () => {
  expect(counter(TEXT, 'temporal_sticky_cache_miss')).toBe(7);
  expect(counter(TEXT, 'absent')).toBe(0);
});

test('a counter is summed per value of one label, wherever the label sits', () => {
  expect(counterBy(TEXT, 'temporal_sticky_cache_miss', 'task_queue')).toEqual({ q1: 3, q2: 4 });
  expect(counterBy(TEXT, 'temporal_sticky_cache_miss', 'namespace')).toEqual({ a: 7 });
  expect(counterBy(TEXT, 'temporal_sticky_cache_miss', 'absent')).toEqual({});
  expect(counterBy(TEXT, 'temporal_sticky_cache_miss', 'task_queue', { namespace: 'a' })).toEqual({ q1: 3, q2: 4 });
  expect(counterBy(TEXT, 'temporal_sticky_cache_miss', 'task_queue', { namespace: 'b' })).toEqual({});
});

test('a histogram is merged over label sets whatever the position of le', () => {
  const h = histogram(TEXT, 'temporal_wft');
  expect(h).toEqual({ count: 10, sum: 402, buckets: [[10, 6], [100, 9], [Infinity, 10]] });
  expect(bucketQuantile(h, 0.5)).toBe(10);
  expect(bucketQuantile(h, 0.9)).toBe(100);
  expect(bucketQuantile(h, 0.99)).toBe(Infinity);
  expect(bucketQuantile(histogram('', 'temporal_wft'), 0.5)).toBeNaN();
});

test('countAbove cuts at the largest bound it may use and says which', () => {
  const h = histogram(TEXT, 'temporal_wft');
  expect(countAbove(h, 5000)).toEqual({ bound: 100, count: 1 });
  expect(countAbove(h, 50)).toEqual({ bound: 10, count: 4 });
  expect(countAbove(h, 5)).toEqual({ bound: 0, count: 10 });
});
