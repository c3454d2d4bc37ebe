// Package clitest holds what the tests of the kollect command packages share: golden files
// under testdata/, rewritten with -update.
package clitest
