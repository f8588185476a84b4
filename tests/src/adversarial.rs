//! Adversarial components built from real ones: an operator of `udfs/`
//! with extra core modules that only a hostile author would add. Shared by
//! the end-to-end tests and the `memory-cap` bench.

use wasm_encoder::{
    CodeSection, ComponentSection, Encode, Function, FunctionSection, InstanceSection, Instruction,
    MemorySection, MemoryType, Module, ModuleArg, ModuleSection, StartSection, TypeSection,
};

/// Wasm pages (64 KiB) per MiB.
const PAGES_PER_MIB: u64 = 16;

/// A core module with `count` memories of `mib` MiB each and a start
/// function that fills every one of them (so each page it is granted
/// becomes resident).
fn filling_module(count: u32, mib: u64) -> Result<Module, String> {
    let bytes = i32::try_from(mib << 20).map_err(|_| format!("{mib} MiB: must be under 2048"))?;
    let mut types = TypeSection::new();
    types.ty().function([], []);
    let mut functions = FunctionSection::new();
    functions.function(0);
    let mut memories = MemorySection::new();
    for _ in 0..count {
        memories.memory(MemoryType {
            minimum: mib * PAGES_PER_MIB,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
    }
    let mut fill = Function::new([]);
    for memory in 0..count {
        fill.instruction(&Instruction::I32Const(0));
        fill.instruction(&Instruction::I32Const(0x5a));
        fill.instruction(&Instruction::I32Const(bytes));
        fill.instruction(&Instruction::MemoryFill(memory));
    }
    fill.instruction(&Instruction::End);
    let mut code = CodeSection::new();
    code.function(&fill);
    let mut module = Module::new();
    module
        .section(&types)
        .section(&functions)
        .section(&memories)
        .section(&StartSection { function_index: 0 })
        .section(&code);
    Ok(module)
}

/// How many core modules `component` defines at its top level (sections
/// with id 1). Components made by `wit-component`, as every operator of
/// `udfs/` is, define their core modules that way and import none.
fn core_modules(component: &[u8]) -> Result<u32, String> {
    let mut at = 8; // magic and version
    let mut count = 0;
    while at < component.len() {
        let id = component[at];
        at += 1;
        let mut size = 0usize;
        let mut shift = 0;
        loop {
            let byte = *component.get(at).ok_or("truncated section size")?;
            at += 1;
            size |= usize::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        if id == 1 {
            count += 1;
        }
        at += size;
    }
    Ok(count)
}

/// `operator` with [`filling_module`] appended and instantiated at its top
/// level: still the same operator to the contract, with `count` more
/// memories created at instantiation.
pub fn with_memories(operator: &[u8], count: u32, mib: u64) -> Result<Vec<u8>, String> {
    let index = core_modules(operator)?;
    let module = filling_module(count, mib)?;
    let mut out = operator.to_vec();
    let section = ModuleSection(&module);
    out.push(section.id());
    section.encode(&mut out);
    let mut instances = InstanceSection::new();
    instances.instantiate(index, Vec::<(&str, ModuleArg)>::new());
    out.push(instances.id());
    instances.encode(&mut out);
    Ok(out)
}
