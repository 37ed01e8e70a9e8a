//! Nothing to use here: the runnable examples are the programs in `examples/examples/`,
//! one per scenario (see `examples/README.md`). This empty library only gives the
//! package the target Cargo requires.
