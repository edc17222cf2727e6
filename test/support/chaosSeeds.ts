/**
 * The fault campaign's seeds in the test command (test/chaos.test.ts runs them, test/chaos.unit.test.ts checks
 * their plans): together they draw every kind of fault of the single node, and a seed on which the campaign once
 * found a violation stays (1003: a payment racing the order's insert; 1007: a payment while Redis was away).
 * CI_SERVER_SEEDS draw the real Temporal server's own faults (its history service killed, its frontend restarted).
 */
export const CI_SEEDS = [31, 55, 1003, 1007, 40];
export const CI_SERVER_SEEDS = [265];
