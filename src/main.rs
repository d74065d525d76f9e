fn main() {
    std::process::exit(conform::cli::main());
}
