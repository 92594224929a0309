public enum VaultClientPlaceholder {}
