// Package shape holds repository-wide checks of the code's shape (a test
// only): no non-test function longer than a screen.
package shape
