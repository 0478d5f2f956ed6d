package dnsproxy

// testMark is a socket mark for the tests of Mark.
const testMark = 0x4b53
