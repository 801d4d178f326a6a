//! Rebuilds when a migration is added: `embed_migrations!` alone does not notice new files.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
