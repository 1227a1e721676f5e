from unilab.entry import console

console()
