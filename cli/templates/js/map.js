// `{{name}}`: a map operator that uppercases each record's value.
//
// `weir build` bundles this module with the SDK and builds a component
// (componentize-js); `node --test` runs index.test.js natively.

// The JS SDK, written out of the `weir` binary by `weir new`.
import { map } from '{{sdk}}/sdk/js/weir-sdk.js';

export const operator = map({
  name: '{{id}}',
  version: '0.1.0',

  map(record) {
    return record.withValue(record.valueString().toUpperCase());
  },
});
