int corpus_dummy;
