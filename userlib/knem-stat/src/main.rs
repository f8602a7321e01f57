//! knem-stat: the program; everything is in the library (src/lib.rs), whose
//! `Cli` the man page and the shell completions are generated from
//! (userlib/knem-gen-docs).

fn main() {
    knem_stat::main()
}
