/** Workflow bundle entry point: every workflow the worker registers. */
export { orderWorkflow } from './order';
