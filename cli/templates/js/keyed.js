// `{{name}}`: a keyed operator that counts records per key in value state
// and emits "{key}\t{count}" for every record.
//
// `weir build` bundles this module with the SDK and builds a component
// (componentize-js); `node --test` runs index.test.js natively.

// The JS SDK, written out of the `weir` binary by `weir new`.
import { codecs, keyed, state } from '{{sdk}}/sdk/js/weir-sdk.js';

export const operator = keyed({
  name: '{{id}}',
  version: '0.1.0',
  // Declared up front so the host creates the storage.
  states: [state.value('count')],

  open(ctx) {
    // A u64 (BigInt), stored as 8 bytes little-endian as every Weir SDK stores it.
    this.count = ctx.valueState('count', codecs.u64);
  },

  processElement(record, ctx) {
    const count = (this.count.get(ctx) ?? 0n) + 1n; // scoped to ctx.key
    this.count.set(ctx, count);
    ctx.collect(ctx.key, [ctx.key, '\t' + count], record.timestamp);
  },
});
