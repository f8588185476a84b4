//! `read-file` (sandbox test): tries to read `/etc/passwd` on the first batch
//! with a record.
//!
//! With no filesystem granted the read fails and the operator returns the
//! error `cannot read /etc/passwd: …`. If the read succeeds (a sandbox
//! escape), it emits the file's content as a record for the test to catch.

use weir_sdk::{Batch, BatchBuilder, Emitted, Error, OpenContext, Operator, Record};

/// The file to read.
const PATH: &str = "/etc/passwd";

/// The reader.
pub struct ReadFile;

impl Operator for ReadFile {
    fn open(_ctx: &OpenContext) -> Result<Self, Error> {
        Ok(ReadFile)
    }

    fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
        if input.is_empty() {
            return Ok(Emitted::empty());
        }
        match std::fs::read_to_string(PATH) {
            Ok(content) => {
                let mut out = BatchBuilder::new();
                out.push(Record::new(&content, 0));
                Ok(Emitted::main(out.finish()))
            }
            Err(e) => Err(Error::new(format!("cannot read {PATH}: {e}"))),
        }
    }
}

weir_sdk::export_operator!(ReadFile);
