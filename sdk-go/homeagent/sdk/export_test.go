package sdk

// ResetFactories empties RegisterFactory's registry (tests only).
func ResetFactories() {
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	factories = map[string]Factory{}
	factoryErrs = nil
}
