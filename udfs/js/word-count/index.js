// word-count: counts records per key (the word). The JavaScript twin of
// udfs/word-count (Rust); both produce byte-identical output.
//
// Value state `count` (u64, little-endian: the shared encoding, so either
// language can read the other's state). Config `emit`: "final" (default)
// registers an event-time timer at i64::MAX the first time a key is seen and
// emits the count when it fires (the host's final watermark at the end of
// bounded input); "updates" emits the new count on every record.
// Output: key = the word, value = "{word}\t{count}".

import { MAX_TIMESTAMP, WeirError, codecs, keyed, state } from '../../../sdk/js/weir-sdk.js';

export const operator = keyed({
  name: 'word-count-js',
  version: '0.1.0',
  states: [state.value('count')],

  open(ctx) {
    const emit = ctx.config.getStr('emit') ?? 'final';
    if (emit !== 'final' && emit !== 'updates') {
      throw new WeirError(`config \`emit\`: expected \`final\` or \`updates\`, got \`${emit}\``);
    }
    this.emitUpdates = emit === 'updates';
    this.count = ctx.valueState('count', codecs.u64);
  },

  processElement(record, ctx) {
    const previous = this.count.get(ctx);
    const count = (previous ?? 0n) + 1n;
    this.count.set(ctx, count);
    if (this.emitUpdates) {
      emit(ctx, count, record.timestamp);
    } else if (previous === undefined) {
      ctx.registerEventTimeTimer(MAX_TIMESTAMP);
    }
  },

  onTimer(time, ctx) {
    const count = this.count.get(ctx);
    if (count !== undefined) emit(ctx, count, time);
  },
});

/** Emits "{word}\t{count}" keyed by the word: the key's bytes as they are, then the count. */
function emit(ctx, count, timestamp) {
  ctx.collect(ctx.key, [ctx.key, '\t' + count], timestamp);
}
