// pair-join: a keyed co-process function (two inputs). The JavaScript twin
// of udfs/pair-join (Rust): every left record with every right record of
// its key, each pair emitted once when its later record arrives, value
// {"key":…,"left":…,"right":…} with the values embedded as they are (the
// inputs are JSON). Each side waits in a list state.

import { codecs, keyedCo, state, utf8 } from '../../../sdk/js/weir-sdk.js';

function arrive(record, ctx, mine, other, isLeft) {
  const key = JSON.stringify(ctx.keyString());
  const value = record.valueString();
  for (const o of other.get(ctx)) {
    const [l, r] = isLeft ? [value, o] : [o, value];
    ctx.collect(ctx.key, utf8.encode(`{"key":${key},"left":${l},"right":${r}}`), record.timestamp);
  }
  mine.add(ctx, value);
}

export const operator = keyedCo({
  name: 'pair-join-js',
  version: '0.1.0',
  states: [state.list('left'), state.list('right')],

  open(ctx) {
    this.left = ctx.listState('left', codecs.string);
    this.right = ctx.listState('right', codecs.string);
  },

  processElement1(record, ctx) {
    arrive(record, ctx, this.left, this.right, true);
  },

  processElement2(record, ctx) {
    arrive(record, ctx, this.right, this.left, false);
  },
});
